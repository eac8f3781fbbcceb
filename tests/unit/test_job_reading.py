"""Reading batch input lines under a byte cap: a file with no newline never sits whole in memory."""

from __future__ import annotations

import io
import json
import tracemalloc
from pathlib import Path

import pytest

from models_registry.core.errors import TooLarge
from models_registry.jobs import chunks, lines


def _line(custom_id: str) -> bytes:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": "/models/m",
                       "body": {"inputs": "x"}}).encode() + b"\n"


def test_lines_under_the_cap_come_whole_and_longer_ones_as_their_size() -> None:
    raw = b"a\n" + b"b" * 10 + b"\n" + b"c" * 9 + b"\n" + b"d" * 25
    assert list(lines.read_lines(io.BytesIO(raw), 10)) == [
        b"a\n", lines.LongLine(11), b"c" * 9 + b"\n", lines.LongLine(25)]


def test_a_file_with_no_newline_is_read_in_bounded_pieces(tmp_path: Path) -> None:
    path = tmp_path / "one-line.jsonl"
    with path.open("wb") as out:
        for _ in range(40):
            out.write(b"x" * (1024 * 1024))
    tracemalloc.start()
    try:
        with path.open("rb") as stream:
            with pytest.raises(TooLarge, match="line 1 is 41943040 bytes"):
                lines.scan(lines.read_lines(stream, 1 << 20), max_line_bytes=1 << 20, max_lines=10,
                           check=lambda url, body: None)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024  # about the cap, not the 40 MiB line


def test_the_driver_reads_past_a_long_line_and_reports_it() -> None:
    raw = _line("a") + b"y" * 5000 + b"\n" + _line("b")
    reader = chunks.ChunkReader(io.BytesIO(raw), chunks.Progress(), 10, 1000)
    chunk = reader.next_chunk()
    assert chunk is not None and reader.next_chunk() is None
    assert [line.custom_id for line in chunk.lines] == ["a", "b"] and chunk.end == len(raw)
    assert [(number, why[:15]) for number, why in chunk.unreadable] == [(2, "line 2 is 5001 ")]


def test_a_chunk_ends_at_its_byte_budget_and_resumes_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chunks, "MAX_CHUNK_BYTES", 300)
    raw = b"".join(_line(f"id-{i}") for i in range(20))  # about 90 bytes a line
    reader = chunks.ChunkReader(io.BytesIO(raw), chunks.Progress(), 256, 1000)
    whole = []
    while (chunk := reader.next_chunk()) is not None:
        whole.append(chunk)
    assert all(len(c.lines) == 4 for c in whole[:-1]) and [ln.custom_id for c in whole for ln in c.lines] == \
        [f"id-{i}" for i in range(20)]
    progress = chunks.advance(chunks.Progress(), whole[0], chunks.ChunkOutcome(output=[], errors=[]))
    again = chunks.ChunkReader(io.BytesIO(raw), progress, 256, 1000).next_chunk()
    assert again == whole[1]
