"""Structured logs: one logfmt line per event, easy to grep at 3 a.m. and to parse.

    ts=2026-11-21T20:40:01.123Z level=info logger=nodeagent.domains event=domain.launched domain=vm1 role=volunteer

Every value is escaped: control characters (newlines, escape sequences, NUL) and Unicode line
separators become visible escapes, so a hostile name in a request can neither forge a log line
nor drive the admin's terminal.
"""
from __future__ import annotations

import logging
import re
import sys
import time
from typing import Any

_RESERVED = set(vars(logging.makeLogRecord({})))
_NEEDS_QUOTES = re.compile(r'[\s"=\\]|[^\x20-\x7e]')
_UNSAFE = re.compile(r'[\x00-\x1f\x7f-\x9f\u2028\u2029]')
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMED.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def quote(value: Any) -> str:
    text = str(value)
    if text and not _NEEDS_QUOTES.search(text):
        return text
    text = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + _UNSAFE.sub(_escape_char, text) + '"'


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        parts = [f"ts={ts}.{int(record.msecs):03d}Z", f"level={record.levelname.lower()}",
                 f"logger={quote(record.name)}", f"event={quote(record.getMessage())}"]
        for key, value in vars(record).items():
            if key not in _RESERVED and not key.startswith("_") and key not in ("message", "asctime"):
                parts.append(f"{key}={quote(value)}")
        if record.exc_info:
            parts.append(f"error={quote(self.formatException(record.exc_info))}")
        return " ".join(parts)


def setup_logging(level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LogfmtFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("apscheduler").setLevel(logging.WARNING)


def log_event(logger: logging.Logger, event: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log `event` (a dotted name such as domain.launched) with key=value fields."""
    clashes = _RESERVED.intersection(fields)
    if clashes:  # logging would refuse them at run time; say which at once
        raise ValueError(f"log field names clash with LogRecord attributes: {sorted(clashes)}")
    logger.log(level, event, extra=fields)
