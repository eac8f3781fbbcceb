"""Chunk bookkeeping of a job (pure): reading the input in bounded chunks, and the progress.

A job advances one chunk at a time: the chunk's results are written as parts and
committed together with the new progress, so a job resumed anywhere reads on from the
first line no committed chunk holds, and no line is ever in two committed chunks.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, replace
from typing import IO

import orjson

from models_registry.core.errors import HostingError
from models_registry.jobs.lines import JobLine, LongLine, parse_line, read_lines


@dataclass(frozen=True)
class Progress:
    """Where a job stands: the next chunk to commit and what the committed ones hold."""

    next_chunk: int = 0
    next_line: int = 1  # 1-based number of the first line not yet committed
    next_offset: int = 0  # byte offset of that line in the input file
    completed: int = 0
    failed: int = 0


@dataclass(frozen=True)
class Chunk:
    """Consecutive lines of the input file, read from byte start to byte end."""

    index: int
    first_line: int
    start: int
    end: int
    next_line: int  # the line number after this chunk's last line
    lines: list[JobLine]
    unreadable: list[tuple[int, str]]  # (line number, why) for lines the upload check would refuse


@dataclass(frozen=True)
class ChunkOutcome:
    """How a chunk's lines ended: records for the output and the error file."""

    output: list[bytes]
    errors: list[bytes]


def advance(progress: Progress, chunk: Chunk, outcome: ChunkOutcome) -> Progress:
    """The progress once chunk is committed (chunks commit strictly in order)."""
    if chunk.index != progress.next_chunk or chunk.start != progress.next_offset:
        raise ValueError(f"chunk {chunk.index} at byte {chunk.start} does not follow {progress}")
    return replace(
        progress, next_chunk=chunk.index + 1, next_line=chunk.next_line, next_offset=chunk.end,
        completed=progress.completed + len(outcome.output), failed=progress.failed + len(outcome.errors),
    )


# A chunk also ends once its lines hold this many bytes: a driver runs several jobs, each a
# couple of chunks ahead, and 256 lines of up to 1 MiB each would be 256 MiB per chunk.
MAX_CHUNK_BYTES = 8 * 1024 * 1024


class ChunkReader:
    """Reads successive chunks of at most max_lines requests (and about MAX_CHUNK_BYTES) from a seekable stream."""

    def __init__(self, stream: IO[bytes], progress: Progress, max_lines: int, max_line_bytes: int) -> None:
        self.stream = stream
        self.index = progress.next_chunk
        self.line = progress.next_line
        self.offset = progress.next_offset
        self.max_lines = max_lines
        self.max_line_bytes = max_line_bytes
        stream.seek(progress.next_offset)
        # A line may end in \r\n, and is refused only over the body limit (as the upload check does).
        self._lines = read_lines(stream, max_line_bytes + 2)

    def next_chunk(self) -> Chunk | None:
        """The next chunk, or None at the end of the file."""
        start, first = self.offset, self.line
        lines: list[JobLine] = []
        unreadable: list[tuple[int, str]] = []
        while len(lines) + len(unreadable) < self.max_lines and self.offset - start < MAX_CHUNK_BYTES:
            raw = next(self._lines, None)
            if raw is None:
                break
            number = self.line
            self.line += 1
            self.offset += raw.size if isinstance(raw, LongLine) else len(raw)
            try:
                line = parse_line(raw, number, self.max_line_bytes + 2)
            except HostingError as error:
                unreadable.append((number, error.message))
                continue
            if line is not None:
                lines.append(line)
        if self.offset == start:
            return None
        chunk = Chunk(index=self.index, first_line=first, start=start, end=self.offset, next_line=self.line,
                      lines=lines, unreadable=unreadable)
        self.index += 1
        return chunk


def request_id() -> str:
    """The id of one line's answer in the output (OpenAI's `batch_req_...`)."""
    return "batch_req_" + secrets.token_hex(12)


def answer_record(custom_id: str | None, status: int, body: bytes, error: dict[str, str] | None = None) -> bytes:
    """One output or error file line for an HTTP answer; body is the answer's JSON, kept byte for byte."""
    body = body.strip() or b"null"
    if b"\n" in body:  # one record per line, whatever the view's JSON looked like
        body = orjson.dumps(orjson.loads(body))
    rid = request_id()
    return b"".join((
        b'{"id":', orjson.dumps(rid), b',"custom_id":', orjson.dumps(custom_id),
        b',"response":{"status_code":', str(status).encode(), b',"request_id":', orjson.dumps(rid),
        b',"body":', body, b'},"error":', orjson.dumps(error), b"}\n",
    ))


def failure_record(custom_id: str | None, code: str, message: str) -> bytes:
    """One error file line for a request that got no HTTP answer (cancelled, expired, unreadable)."""
    return orjson.dumps({"id": request_id(), "custom_id": custom_id, "response": None,
                         "error": {"code": code, "message": message}}) + b"\n"
