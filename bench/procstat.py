"""CPU time per process (and its children) from /proc, to see where the CPU goes during a level."""

from __future__ import annotations

import os
import time
from pathlib import Path

TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def _descendants(pid: int) -> list[int]:
    """pid and every live descendant of it."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                todo.extend(int(c) for c in (task / "children").read_text().split())
            except OSError:
                pass
    return found


def cpu_seconds(pid: int, children: bool = True) -> float:
    """User + system CPU seconds of a process (and its live descendants); 0 if it is gone."""
    total = 0.0
    for current in _descendants(pid) if children else [pid]:
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / TICKS_PER_S  # utime, stime
    return total


def machine_busy_seconds() -> float:
    """CPU seconds all cores spent busy (not idle or iowait) since boot."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return (sum(values[:8]) - idle) / TICKS_PER_S


class CpuMeter:
    """Snapshots of named process groups and of the whole machine; deltas between two marks."""

    def __init__(self, groups: dict[str, list[int]], without_children: tuple[str, ...] = ()) -> None:
        self.groups = groups
        self.without_children = without_children  # groups whose children are counted elsewhere
        self.marks: dict[str, dict[str, float]] = {}

    def snapshot(self) -> dict[str, float]:
        """CPU seconds per group now, plus `machine` (all busy CPU)."""
        shot = {name: sum(cpu_seconds(p, children=name not in self.without_children) for p in pids)
                for name, pids in self.groups.items()}
        shot["machine"] = machine_busy_seconds()
        return shot

    def mark(self, name: str) -> None:
        """Remember a snapshot under name."""
        self.marks[name] = self.snapshot()

    def between(self, first: str, last: str) -> dict[str, float]:
        """CPU seconds per group between two marks; `other` is busy CPU no group accounts for."""
        a, b = self.marks[first], self.marks[last]
        delta = {name: b[name] - a[name] for name in b}
        delta["other"] = max(0.0, delta.pop("machine") - sum(v for k, v in delta.items() if k != "machine"))
        return delta


def wait_quiet(limit_s: float, max_other_cores: float = 0.3, groups: CpuMeter | None = None) -> float:
    """Wait (up to limit_s) until processes outside ours keep under max_other_cores busy; the last reading."""
    deadline = time.monotonic() + limit_s
    while True:
        meter = groups or CpuMeter({})
        meter.mark("quiet-a")
        time.sleep(1.0)
        meter.mark("quiet-b")
        other = meter.between("quiet-a", "quiet-b")["other"]
        if other <= max_other_cores or time.monotonic() >= deadline:
            return other
