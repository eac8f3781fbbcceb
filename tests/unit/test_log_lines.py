"""hosting.log_lines: the same text as logging's own formatters, its second's part made once."""

from __future__ import annotations

import json
import logging

import pytest
from pythonjsonlogger.json import JsonFormatter

from hosting.log_lines import JsonLinesFormatter, PlainFormatter

FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def _record(created: float) -> logging.LogRecord:
    record = logging.LogRecord("models_registry.requests", logging.INFO, __file__, 1, "request id=%s", ("r1",), None)
    record.created, record.msecs = created, (created - int(created)) * 1000
    return record


@pytest.mark.parametrize("datefmt", [None, "%Y-%m-%dT%H:%M:%S"])
def test_plain_lines_read_as_loggings(datefmt: str | None) -> None:
    ours, theirs = PlainFormatter(FORMAT, datefmt), logging.Formatter(FORMAT, datefmt)
    for created in (1764290112.001, 1764290112.999, 1764290113.5, 1764290112.25, 1764290199.0):  # back in time too
        assert ours.format(_record(created)) == theirs.format(_record(created))


def test_json_lines_read_as_python_json_loggers() -> None:
    kwargs = {"fmt": FORMAT, "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"}}
    ours, theirs = JsonLinesFormatter(**kwargs), JsonFormatter(**kwargs)
    for created in (1764290112.001, 1764290112.75, 1764290113.5):
        assert json.loads(ours.format(_record(created))) == json.loads(theirs.format(_record(created)))
