"""Structured logs: one logfmt line per event, easy to grep at 3 a.m. and to parse.

    ts=2026-11-21T20:40:01.123Z level=info logger=nodeagent.lifecycle event=domain.launched name=vm1 role=volunteer
"""
from __future__ import annotations

import logging
import sys
import time
from typing import Any

_RESERVED = set(vars(logging.makeLogRecord({})))


def _quote(value: Any) -> str:
    text = str(value)
    if text == "" or any(c in text for c in ' "=\n\t'):
        text = '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        parts = [f"ts={ts}.{int(record.msecs):03d}Z", f"level={record.levelname.lower()}",
                 f"logger={record.name}", f"event={_quote(record.getMessage())}"]
        for key, value in vars(record).items():
            if key not in _RESERVED and not key.startswith("_") and key not in ("message", "asctime"):
                parts.append(f"{key}={_quote(value)}")
        if record.exc_info:
            parts.append(f"error={_quote(self.formatException(record.exc_info))}")
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
