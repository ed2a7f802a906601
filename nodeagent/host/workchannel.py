"""A backfill guest's work channel, read: the only module that reads those files (logfiles removes them).

A backfill domain has a virtio-serial port (domainxml.WORK_CHANNEL) whose output virtlogd keeps
in `<console dir>/<name>.work`, as it keeps the console log: rotated at virtlogd's max_size, so
the file stays bounded whatever the guest writes. The guest's job runner writes one line per
change, `busy N` when job N starts and `idle N` when it ends (N is for people reading the file).

What the agent reports is the last well-formed line in the file's tail and how long ago it was
written (the file's mtime, virtlogd's last write): no state of its own, so a restarted agent
reports the same. What a guest says is its own word: the controller never dates a busy spell
before the VM's launch, so a guest that says busy while it idles (a lie, or a hung job runner)
can look at most as old as it is, the place most_recent gives every VM; looking idle or freshly
busy only makes it an earlier victim.
"""
from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from gleaner_common.ids import MAX_WORK_AGE_SECONDS

TAIL_BYTES = 256            # the last statement is in here unless the guest wrote garbage after it
# A job runner writes a dozen bytes per job: a file past this says the guest writes much more
# (a flood, or output meant for its console); virtlogd still caps it, but an admin should know.
NOISY_BYTES = 64 * 1024
_STATEMENT = re.compile(rb"(?:busy|idle)(?: [0-9]{1,20})?")


@dataclass(frozen=True)
class WorkState:
    state: str        # "" (nothing said yet, or no channel), "idle" or "busy"
    for_s: float      # seconds since the guest said it (0 when state is "")
    noisy: bool = False   # the file holds far more than statements (NOISY_BYTES)


SILENT = WorkState("", 0.0)


def channel_path(console_dir: Path, name: str) -> Path:
    """Where virtlogd keeps domain `name`'s work channel (beside its console log)."""
    return console_dir / f"{name}.work"


def read_work_state(path: Path, now: float) -> WorkState:
    """The guest's last statement in `path` and its age at `now` (wall clock, seconds). Anything
    but a regular file (none: a domain from before the channel, or not a backfill one; a
    symlink, directory, FIFO or device left there by hand) says nothing, without blocking."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return SILENT
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return SILENT
        start = max(info.st_size - TAIL_BYTES, 0)
        tail = os.pread(fd, TAIL_BYTES, start)
    except OSError:
        return SILENT
    finally:
        os.close(fd)
    said = last_statement(tail, whole=start == 0)
    noisy = info.st_size > NOISY_BYTES
    if not said:
        return WorkState("", 0.0, noisy) if noisy else SILENT
    return WorkState(said, min(max(now - info.st_mtime, 0.0), float(MAX_WORK_AGE_SECONDS)), noisy)


def last_statement(tail: bytes, whole: bool = True) -> str:
    """The last complete `busy`/`idle` line in `tail` ("" if none). A last line without its
    newline is still being written, and (unless `whole`: the tail is the file's start) the
    first line may be cut: neither counts."""
    lines = tail.split(b"\n")[:-1]   # the part after the last newline is no complete line
    if not whole:
        lines = lines[1:]
    for line in reversed(lines):
        if _STATEMENT.fullmatch(line.rstrip(b"\r")):
            return line[:4].decode()
    return ""
