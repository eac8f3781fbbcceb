"""The project's log formatters: logging's and python-json-logger's, a record's time formatted once per second.

Every served request writes a log line; logging formats its time with a localtime and a
strftime each time. A second's text is the same for every line in it, so it is made once
and only the milliseconds are added per line: the same text, a few microseconds less a request.
"""

from __future__ import annotations

import logging
import time
from pythonjsonlogger.json import JsonFormatter


class SecondTimes:
    """A logging.Formatter mixin: formatTime's text, its second part made once per second and datefmt."""

    _second: tuple[int, str | None, str] = (-1, None, "")  # (whole second, datefmt, its text)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802 - logging's name
        """logging.Formatter.formatTime's text (strftime has no unit under a second: a second's text is one)."""
        second, fmt, text = self._second
        whole = int(record.created)
        if whole != second or datefmt != fmt:
            stamp = self.converter(record.created)  # type: ignore[attr-defined]
            text = time.strftime(datefmt or self.default_time_format, stamp)  # type: ignore[attr-defined]
            self._second = (whole, datefmt, text)  # one assignment: a thread sees the old tuple or the new
        if datefmt or not self.default_msec_format:  # type: ignore[attr-defined]
            return text
        return self.default_msec_format % (text, record.msecs)  # type: ignore[attr-defined]


class PlainFormatter(SecondTimes, logging.Formatter):
    """logging.Formatter with the time's text made once per second."""


class JsonLinesFormatter(SecondTimes, JsonFormatter):
    """python-json-logger's JsonFormatter with the time's text made once per second."""
