"""A sampling profile of a running process (py-spy), summarised as where its CPU goes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any


def py_spy() -> str | None:
    """The py-spy executable beside this Python (requirements-dev.txt pins it), or on PATH."""
    here = Path(sys.executable).parent / "py-spy"
    return str(here) if here.is_file() else shutil.which("py-spy")


def start(pids: list[int], seconds: float, out_dir: Path, rate: int = 250,
          prefix: str = "web") -> list[tuple[subprocess.Popen[bytes], Path]]:
    """Start one non-blocking py-spy recorder per pid (collapsed stacks); wait with collect()."""
    exe = py_spy()
    if exe is None:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    running = []
    for pid in pids:
        path = out_dir / f"{prefix}-{pid}.collapsed"
        process = subprocess.Popen([exe, "record", "--nonblocking", "--subprocesses", "-p", str(pid), "-d", str(max(1, int(seconds))),
                                    "-r", str(rate), "-f", "raw", "-o", str(path)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        running.append((process, path))
    return running


def collect(running: list[tuple[subprocess.Popen[bytes], Path]]) -> list[Path]:
    """Wait for the recorders; the files they wrote."""
    paths = []
    for process, path in running:
        try:
            process.wait(120)
        except subprocess.TimeoutExpired:
            process.kill()
        if path.is_file():
            paths.append(path)
    return paths


def _frame_name(frame: str) -> str:
    """`func (path/to/module.py:line)` -> `func (module.py)`, and shortens site-packages paths."""
    name, _, where = frame.partition(" (")
    file = where.rstrip(")").rsplit(":", 1)[0]
    for marker in ("site-packages/", "python3.11/", "/wt/hop/", "/main/"):
        if marker in file:
            file = file.split(marker, 1)[1]
    return f"{name} ({file})"


def _area(frame: str) -> str:
    """Which part of the stack a frame belongs to, by its file."""
    file = frame.partition(" (")[2]
    for area in ("models_registry/", "hosting/", "channels_redis/", "redis/", "django/", "uvicorn/", "msgpack",
                 "orjson", "pydantic", "asyncio/", "prometheus_client/", "httptools", "uvloop", "logging/",
                 "channels/", "asgiref/"):
        if area in file:
            return area.rstrip("/")
    return "other"


def summarize(paths: list[Path], top: int = 25) -> dict[str, Any]:
    """Samples; self time per function (the leaf) and inclusive time per function and per area."""
    leaf: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    areas: Counter[str] = Counter()
    total = 0
    for path in paths:
        for line in path.read_text(errors="replace").splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            n = int(count)
            frames = [_frame_name(f) for f in stack.split(";") if f and not f.startswith("process ")
                      and not f.startswith("thread ")]
            if not frames:
                continue
            total += n
            leaf[frames[-1]] += n
            for frame in set(frames):
                inclusive[frame] += n
            areas[_area(frames[-1])] += n
    share = (lambda n: round(100 * n / total, 1)) if total else (lambda n: 0.0)
    # Frames under nearly every sample (the server's main loop) say nothing: left out.
    inside = [(f, n) for f, n in inclusive.most_common() if n < 0.8 * total]
    ours = [(f, n) for f, n in inside if "models_registry/" in f or "hosting/" in f]
    return {"samples": total,
            "self": [(f, share(n)) for f, n in leaf.most_common(top)],
            "inclusive": [(f, share(n)) for f, n in inside[:top]],
            "inclusive_ours": [(f, share(n)) for f, n in ours[:top]],
            "self_by_area": [(a, share(n)) for a, n in areas.most_common()]}


def render(summary: dict[str, Any], title: str) -> str:
    """The summary as markdown tables (percent of the profiled processes' samples)."""
    lines = [f"# {title}", "", f"{summary['samples']} samples (py-spy, non-blocking, active threads only).", "",
             "## Self time by area (the leaf frame's package)", "", "| area | % |", "|---|---:|"]
    lines += [f"| {a} | {p} |" for a, p in summary["self_by_area"]]
    lines += ["", "## Self time (leaf functions)", "", "| function | % |", "|---|---:|"]
    lines += [f"| `{f}` | {p} |" for f, p in summary["self"]]
    lines += ["", "## Inclusive time (frames under more than 80% of samples left out)", "",
              "| function | % |", "|---|---:|"]
    lines += [f"| `{f}` | {p} |" for f, p in summary["inclusive"]]
    lines += ["", "## Inclusive time in our code (models_registry, hosting)", "", "| function | % |", "|---|---:|"]
    lines += [f"| `{f}` | {p} |" for f, p in summary["inclusive_ours"]]
    return "\n".join(lines) + "\n"
