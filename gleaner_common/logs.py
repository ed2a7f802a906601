"""Structured logs: one logfmt line per event, easy to grep at 3 a.m. and to parse.

    ts=2026-11-21T20:40:01.123Z level=info logger=nodeagent.domains event=domain.launched domain=vm1 role=volunteer

Every value is escaped: control characters (newlines, escape sequences, NUL) and Unicode line
separators become visible escapes, so a hostile name in a request can neither forge a log line
nor drive the admin's terminal. Booleans print as true and false.

Other libraries' messages come out the same way (setup_logging): APScheduler's as
event=scheduler.* with its text; gRPC's C core, which writes to file descriptor 2 itself, is
read back from a pipe put in fd 2's place and logged as event=grpc.core (level from its line's
first letter, where=its source file and line, text=the rest).
"""
from __future__ import annotations

import logging
import os
import re
import sys
import threading
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
    if isinstance(value, bool):   # as TOML, JSON and the admin's config files write them
        return "true" if value else "false"
    text = str(value)
    if text and not _NEEDS_QUOTES.search(text):
        return text
    text = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + _UNSAFE.sub(_escape_char, text) + '"'


# APScheduler's warnings as events: (a phrase of its message, the event). Others: scheduler.message.
SCHEDULER_EVENTS = (("was missed by", "scheduler.job_missed"),
                    ("maximum number of running instances reached", "scheduler.job_skipped"),
                    ("raised an exception", "scheduler.job_failed"))


def foreign_event(record: logging.LogRecord) -> tuple[str, dict[str, str]] | None:
    """(event, fields) for a record of a library that logs sentences, not events; None for ours."""
    root = record.name.partition(".")[0]
    if root == "apscheduler":
        text = record.getMessage()
        event = next((e for phrase, e in SCHEDULER_EVENTS if phrase in text), "scheduler.message")
        return event, {"text": text}
    if root in ("grpc", "absl"):
        return f"{root}.message", {"text": record.getMessage()}
    return None


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        foreign = foreign_event(record)
        event, extra = foreign if foreign else (record.getMessage(), {})
        parts = [f"ts={ts}.{int(record.msecs):03d}Z", f"level={record.levelname.lower()}",
                 f"logger={quote(record.name)}", f"event={quote(event)}"]
        own = {key: value for key, value in vars(record).items()
               if key not in _RESERVED and not key.startswith("_") and key not in ("message", "asctime")}
        fields = {**extra, **own}
        parts += [f"{key}={quote(value)}" for key, value in fields.items()]
        if record.exc_info:
            parts.append(f"error={quote(self.formatException(record.exc_info))}")
        return " ".join(parts)


# gRPC's C core logs through absl straight to fd 2: only its errors, and no tracers, unless the
# environment asks for more (GRPC_VERBOSITY=INFO or DEBUG, GRPC_TRACE=...).
# Read when grpc is imported, so set here, at this module's import: the daemons import it
# before anything imports grpc (setup_logging sets them again for a process that did not).
GRPC_ENV_DEFAULTS = {"GRPC_VERBOSITY": "ERROR", "GRPC_TRACE": ""}
for _key, _value in GRPC_ENV_DEFAULTS.items():
    os.environ.setdefault(_key, _value)
# A C-core line: E1126 14:50:08.664808    1854 ssl_transport_security.cc:3238] No match found ...
_CORE_LINE = re.compile(r"^([DIWEF])\d{4} [\d:.]+\s+\d+ ([^\]\s]+)\] ?(.*)$")
_CORE_LEVELS = {"D": logging.DEBUG, "I": logging.INFO, "W": logging.WARNING, "E": logging.ERROR, "F": logging.CRITICAL}
_captured = False


def native_line(line: str) -> tuple[int, str, dict[str, str]]:
    """(level, event, fields) for a line written to fd 2 by native code: gRPC's C core, or other."""
    match = _CORE_LINE.match(line)
    if match:
        return _CORE_LEVELS[match.group(1)], "grpc.core", {"where": match.group(2), "text": match.group(3)}
    return logging.WARNING, "stderr.line", {"text": line}


def capture_native_stderr() -> None:
    """Put a pipe in fd 2's place and log each line native code writes there (gRPC's C core,
    libraries' warnings) through the structured logger; Python's own writes (sys.stderr, the log
    handler) go to the original stream directly. Once per process: a second call does nothing."""
    global _captured
    if _captured:
        return
    _captured = True
    original = os.fdopen(os.dup(2), "w", buffering=1, encoding="utf-8", errors="backslashreplace")
    read_end, write_end = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(write_end, 2)
    os.close(write_end)
    sys.stderr = original
    threading.Thread(target=_relay, args=(read_end,), name="native-stderr", daemon=True).start()


def _relay(read_end: int) -> None:
    log = logging.getLogger("native")
    with os.fdopen(read_end, "r", encoding="utf-8", errors="backslashreplace") as lines:
        for line in lines:
            if line.strip():
                level, event, fields = native_line(line.rstrip("\n"))
                log.log(level, event, extra=fields)


def setup_logging(level: str = "info", capture_native: bool = True) -> None:
    """One logfmt handler on the root logger, at `level`. `capture_native`: also gRPC's C core
    and anything else written to fd 2 (capture_native_stderr); the daemons' choice."""
    for key, value in GRPC_ENV_DEFAULTS.items():
        os.environ.setdefault(key, value)
    if capture_native:
        capture_native_stderr()
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
