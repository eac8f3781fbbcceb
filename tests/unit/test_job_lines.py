"""Batch input lines: parsing, the whole-file check, chunked reading and records."""

from __future__ import annotations

import io
import json
from typing import Any

import orjson
import pytest

from models_registry.core.errors import Forbidden, InvalidInput, TooLarge
from models_registry.jobs import chunks, lines


def _line(custom_id: str = "a", url: str = "/models/m", body: Any = None, **extra: Any) -> bytes:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url,
                       "body": {"inputs": "x"} if body is None else body, **extra}).encode() + b"\n"


def _accept(url: str, body: dict[str, Any]) -> None:
    return None


def _scan(raw: bytes, max_lines: int = 100, max_line_bytes: int = 1000, check: Any = _accept) -> lines.FileSummary:
    return lines.scan(io.BytesIO(raw).readlines(), max_line_bytes=max_line_bytes, max_lines=max_lines, check=check)


def test_parse_line_reads_a_request() -> None:
    line = lines.parse_line(_line("id-1", "/v1/embeddings", {"model": "m", "input": "hi"}), 3, 1000)
    assert line == lines.JobLine(number=3, custom_id="id-1", url="/v1/embeddings", body={"model": "m", "input": "hi"})


def test_blank_lines_are_skipped() -> None:
    assert lines.parse_line(b"  \n", 1, 1000) is None
    assert _scan(b"\n" + _line("a") + b"\n" + _line("b")).lines == 2


@pytest.mark.parametrize(("raw", "fragment"), [
    (b"not json\n", "is not valid JSON ("),
    (b"[1, 2]\n", "must be a JSON object"),
    (json.dumps({"custom_id": "a", "method": "POST", "url": "/models/m"}).encode(), "missing body"),
    (_line(extra_field=1), "unknown field(s) extra_field"),
    (_line(custom_id=""), "custom_id must be a non-empty string"),
    (_line(url="/admin/"), "url '/admin/' is not served"),
    (_line(body=["x"]), "body must be a JSON object"),
    (json.dumps({"custom_id": "a", "method": "GET", "url": "/models/m", "body": {}}).encode(), "method must be POST"),
])
def test_bad_lines_are_refused_with_their_line_number(raw: bytes, fragment: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        _scan(_line("first") + raw)
    assert "line 2" in caught.value.message and fragment in caught.value.message


def test_a_line_over_the_body_limit_is_too_large() -> None:
    with pytest.raises(TooLarge, match="line 1 is"):
        _scan(_line(body={"inputs": "x" * 2000}))


def test_duplicate_custom_ids_are_refused() -> None:
    with pytest.raises(InvalidInput, match="custom_id 'a' is used twice"):
        _scan(_line("a") + _line("b") + _line("a"))


def test_too_many_lines_is_too_large() -> None:
    with pytest.raises(TooLarge, match="more than 2 requests"):
        _scan(_line("a") + _line("b") + _line("c"), max_lines=2)


def test_an_empty_file_is_refused() -> None:
    with pytest.raises(InvalidInput, match="no requests"):
        _scan(b"\n\n")


def test_the_route_check_names_the_line_and_keeps_forbidden() -> None:
    def check(url: str, body: dict[str, Any]) -> None:
        if body.get("inputs") == "secret":
            raise Forbidden("not your model")
        if body.get("inputs") == "bad":
            raise InvalidInput("no model named 'x'")

    with pytest.raises(Forbidden, match="line 2: not your model"):
        _scan(_line("a") + _line("b", body={"inputs": "secret"}), check=check)
    with pytest.raises(InvalidInput, match="line 1: no model named"):
        _scan(_line("a", body={"inputs": "bad"}), check=check)


def test_distinct_urls_are_summarised() -> None:
    raw = _line("a", "/models/m") + _line("b", "/models/m/t") + _line("c", "/models/m")
    assert _scan(raw).urls == ["/models/m", "/models/m/t"]


def test_model_of_each_route() -> None:
    assert lines.model_of("/v1/embeddings", {"model": "emb/query"}) == ("emb", "query")
    assert lines.model_of("/v1/embeddings", {}) is None
    assert lines.model_of("/models/m", {}) == ("m", None)
    assert lines.model_of("/models/m/t", {}) == ("m", "t")
    assert lines.model_of("/models/m/t/x", {}) is None


def _file(count: int) -> bytes:
    return b"".join(_line(f"id-{i}", body={"inputs": f"text {i}"}) + (b"\n" if i % 7 == 0 else b"")
                    for i in range(count))


def _read_all(raw: bytes, progress: chunks.Progress, size: int) -> list[chunks.Chunk]:
    reader = chunks.ChunkReader(io.BytesIO(raw), progress, size, 1000)
    out = []
    while (chunk := reader.next_chunk()) is not None:
        out.append(chunk)
    return out


def test_chunks_cover_every_line_once_and_resume_at_any_commit() -> None:
    raw = _file(50)
    whole = _read_all(raw, chunks.Progress(), 8)
    assert [line.custom_id for c in whole for line in c.lines] == [f"id-{i}" for i in range(50)]
    assert all(len(c.lines) <= 8 for c in whole) and whole[-1].end == len(raw)
    progress = chunks.Progress()
    for done in whole[:3]:
        progress = chunks.advance(progress, done, chunks.ChunkOutcome(output=[b"x"] * len(done.lines), errors=[]))
    resumed = _read_all(raw, progress, 8)
    assert resumed == whole[3:]  # same chunks, same indexes, same offsets
    assert progress.completed == sum(len(c.lines) for c in whole[:3]) and progress.next_chunk == 3


def test_advance_refuses_a_chunk_out_of_order() -> None:
    first, second = _read_all(_file(20), chunks.Progress(), 8)[:2]
    with pytest.raises(ValueError):
        chunks.advance(chunks.Progress(), second, chunks.ChunkOutcome(output=[], errors=[]))
    after = chunks.advance(chunks.Progress(), first, chunks.ChunkOutcome(output=[b"a"], errors=[b"b", b"c"]))
    assert (after.next_chunk, after.next_offset, after.completed, after.failed) == (1, first.end, 1, 2)


def test_records_keep_the_answer_bytes_and_are_one_line_each() -> None:
    body = b'{"error":"bad","error_type":"invalid_input"}'
    record = chunks.answer_record("c-1", 400, body, {"code": "invalid_input", "message": "bad"})
    assert record.endswith(b"\n") and record.count(b"\n") == 1 and body in record
    parsed = orjson.loads(record)
    assert parsed["custom_id"] == "c-1" and parsed["response"]["status_code"] == 400
    assert parsed["response"]["body"] == {"error": "bad", "error_type": "invalid_input"}
    assert parsed["id"].startswith("batch_req_") and parsed["error"]["code"] == "invalid_input"
    pretty = chunks.answer_record("c-2", 200, b'[\n 1,\n 2\n]')
    assert pretty.count(b"\n") == 1 and orjson.loads(pretty)["response"]["body"] == [1, 2]
    failure = orjson.loads(chunks.failure_record("c-3", "batch_cancelled", "cancelled"))
    assert failure["response"] is None and failure["error"] == {"code": "batch_cancelled", "message": "cancelled"}
