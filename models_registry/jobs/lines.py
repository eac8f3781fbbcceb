"""Reading and checking the lines of a batch input file (pure: no database, no I/O).

A line is one JSON object `{"custom_id", "method", "url", "body"}`; blank lines are
skipped (by the upload check and the job driver alike, so line numbers agree).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import orjson

from models_registry.core import paths
from models_registry.core.errors import Forbidden, HostingError, InvalidInput, TooLarge
from models_registry.core.task_key import TaskKey

FIELDS = ("custom_id", "method", "url", "body")
MAX_CUSTOM_ID_CHARS = 512
MAX_DISTINCT_URLS = 64
_SKIP_BLOCK = 256 * 1024  # how much of a line over the cap is read at a time (and dropped)  # a file's distinct urls are kept on its row
EMBEDDINGS_URL = paths.EMBEDDINGS_PATH

# What a route check is given: (url, body); it raises a HostingError for a line it refuses.
RouteCheck = Callable[[str, dict[str, Any]], None]


@dataclass(frozen=True)
class JobLine:
    """One request of a batch file."""

    number: int  # 1-based line number in the file
    custom_id: str
    url: str
    body: dict[str, Any]


@dataclass(frozen=True)
class LongLine:
    """A line over the size cap, skipped while it was read (its bytes are never held whole)."""

    size: int  # its bytes, newline included


@dataclass
class FileSummary:
    """What a complete scan of an input file found."""

    lines: int = 0
    urls: list[str] = field(default_factory=list)


def model_of(url: str, body: dict[str, Any]) -> tuple[str, str | None] | None:
    """(model name, task name or None) that url calls, or None for a url we do not serve."""
    if url == EMBEDDINGS_URL:
        model = body.get("model")
        if not isinstance(model, str) or not model:
            return None
        name, task = TaskKey.parse(model)
        return name, task or None
    return paths.model_path(url)


def is_served_url(url: str) -> bool:
    """Whether url is one of the routes a batch may call."""
    return url == EMBEDDINGS_URL or paths.model_path(url) is not None


def _line_error(number: int, error: HostingError) -> HostingError:
    kind = type(error) if isinstance(error, (TooLarge, Forbidden)) else InvalidInput
    return kind(f"line {number}: {error.message}")


def parse_line(raw: bytes | LongLine, number: int, max_line_bytes: int) -> JobLine | None:
    """The request on one line (None for a blank line); raises InvalidInput/TooLarge naming the line."""
    size = raw.size if isinstance(raw, LongLine) else len(raw)
    if isinstance(raw, LongLine) or size > max_line_bytes:
        raise TooLarge(f"line {number} is {size} bytes; one request may be at most {max_line_bytes} bytes")
    if not raw.strip():
        return None
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise InvalidInput(f"line {number} is not valid JSON ({error.msg} at column {error.colno}); the file "
                           "must be JSONL: one request "
                           f'object per line like {{"custom_id": "1", "method": "POST", "url": "{EMBEDDINGS_URL}", '
                           '"body": {...}}') from None
    if not isinstance(value, dict):
        raise InvalidInput(f"line {number} must be a JSON object with {', '.join(FIELDS)}")
    missing = [f for f in FIELDS if f not in value]
    unknown = sorted(set(value) - set(FIELDS))
    if missing or unknown:
        detail = f"missing {', '.join(missing)}" if missing else f"unknown field(s) {', '.join(unknown)}"
        raise InvalidInput(f"line {number}: {detail}; each line has exactly {', '.join(FIELDS)}")
    custom_id, method, url, body = (value[f] for f in FIELDS)
    if not isinstance(custom_id, str) or not custom_id or len(custom_id) > MAX_CUSTOM_ID_CHARS:
        raise InvalidInput(f"line {number}: custom_id must be a non-empty string of at most "
                           f"{MAX_CUSTOM_ID_CHARS} characters")
    if method != "POST":
        raise InvalidInput(f"line {number}: method must be POST, not {method!r}")
    if not isinstance(url, str) or not is_served_url(url):
        raise InvalidInput(f"line {number}: url {url!r} is not served; use {paths.SERVED_BY_JOBS}")
    if not isinstance(body, dict):
        raise InvalidInput(f"line {number}: body must be a JSON object (the request body of {url})")
    return JobLine(number=number, custom_id=custom_id, url=url, body=body)


def read_lines(stream: IO[bytes], cap: int) -> Iterator[bytes | LongLine]:
    """Lines split on b"\\n" only, of at most cap bytes each (newline included).

    A longer line is read on in bounded pieces up to its end and comes as LongLine(size):
    a file with no newline at all never sits whole in memory.
    """
    while raw := stream.readline(cap + 1):
        if len(raw) <= cap:
            yield raw
            continue
        size = len(raw)
        while not raw.endswith(b"\n"):
            raw = stream.readline(_SKIP_BLOCK)
            if not raw:
                break
            size += len(raw)
        yield LongLine(size)


def numbered(raw_lines: Iterable[bytes | LongLine]) -> Iterator[tuple[int, bytes | LongLine]]:
    """(1-based line number, raw line) for each line."""
    return enumerate(raw_lines, start=1)


def scan(raw_lines: Iterable[bytes | LongLine], *, max_line_bytes: int, max_lines: int, check: RouteCheck) -> FileSummary:
    """Check every line of a file; raise the first problem as a HostingError naming its line.

    Duplicate custom_ids are found with a digest per id (16 bytes each, not the ids).
    """
    summary = FileSummary()
    seen: set[bytes] = set()
    for number, raw in numbered(raw_lines):
        line = parse_line(raw, number, max_line_bytes)
        if line is None:
            continue
        summary.lines += 1
        if summary.lines > max_lines:
            raise TooLarge(f"the file has more than {max_lines} requests; split it into several batches")
        digest = hashlib.blake2b(line.custom_id.encode(), digest_size=16).digest()
        if digest in seen:
            raise InvalidInput(f"line {number}: custom_id {line.custom_id!r} is used twice; each request needs "
                               "its own custom_id")
        seen.add(digest)
        if line.url not in summary.urls:
            if len(summary.urls) >= MAX_DISTINCT_URLS:
                raise InvalidInput(f"line {number}: the file calls more than {MAX_DISTINCT_URLS} different urls")
            summary.urls.append(line.url)
        try:
            check(line.url, line.body)
        except HostingError as error:
            raise _line_error(number, error) from None
    if summary.lines == 0:
        raise InvalidInput("the file has no requests: send JSONL, one request object per line")
    return summary
