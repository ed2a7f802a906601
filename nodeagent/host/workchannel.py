"""A backfill guest's work channel, read: the only module that reads those files (logfiles removes them).

A backfill domain has a virtio-serial port (domainxml.WORK_CHANNEL) whose output virtlogd keeps
in `<console dir>/<name>.work`, as it keeps the console log: rotated at virtlogd's max_size, so
the file stays bounded whatever the guest writes. The guest's job runner writes one line per
change, `busy N` when job N starts and `idle N` when it ends (N is for people reading the file),
and may say `progress DONE TOTAL`: DONE of TOTAL units of its tenant's job are done (RHIC's
progress score, as the job's runner sees it; whole numbers, 0 <= DONE <= TOTAL, 1 <= TOTAL <=
MAX_PROGRESS_TOTAL). A progress line out of those bounds, or malformed, is no statement: the
last well-formed one before it still counts. Progress is the guest's word like the rest: the
controller lets it steer only that VM's own tenant's sizing, within the tenant's bounds.

What the agent reports is the last well-formed line in the file's tail and how long ago it was
written (the file's mtime, virtlogd's last write): no state of its own, so a restarted agent
reports the same. What a guest says is its own word: the controller never dates a busy spell
before the VM's launch, so a guest that says busy while it idles (a lie, or a hung job runner)
can look at most as old as it is, the place most_recent gives every VM; looking idle or freshly
busy only makes it an earlier victim.

Every statement is dated by the file's last write: exact for the last line, and for an earlier
one an age it is at least as old as. So a runner says `progress` just before its `busy`/`idle`
line (the tiny guest says it as each job ends, before the next `busy`): a progress line written
in the middle of a busy spell makes that spell look as young as the progress line.
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
MAX_PROGRESS_TOTAL = 10**15   # far past any real count of a job's units; the controller refuses more
_PROGRESS = re.compile(rb"progress ([0-9]{1,16}) ([0-9]{1,16})")   # 16 digits hold 10**15


@dataclass(frozen=True)
class WorkState:
    state: str        # "" (nothing said yet, or no channel), "idle" or "busy"
    for_s: float      # seconds since the guest said it (0 when state is "")
    noisy: bool = False   # the file holds far more than statements (NOISY_BYTES)
    progress: tuple[int, int] | None = None   # the last well-formed `progress DONE TOTAL`, if any
    progress_for_s: float = 0.0   # seconds since the channel's last write (the progress is at least as old)


SILENT = WorkState("", 0.0)


def progress_fields(work: WorkState) -> dict[str, int | float]:
    """A WorkState's progress as the protos' fields (agent Domain, controller ReportedVm and
    HibernatedVm): progress_done, progress_total, progress_for_s; 0/0 when the guest said none."""
    done, total = work.progress or (0, 0)
    return dict(progress_done=done, progress_total=total, progress_for_s=work.progress_for_s)


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
    progress = last_progress(tail, whole=start == 0)
    noisy = info.st_size > NOISY_BYTES
    if not said and progress is None:
        return WorkState("", 0.0, noisy) if noisy else SILENT
    age = min(max(now - info.st_mtime, 0.0), float(MAX_WORK_AGE_SECONDS))
    return WorkState(said, age if said else 0.0, noisy, progress, age if progress is not None else 0.0)


def _complete_lines(tail: bytes, whole: bool) -> list[bytes]:
    """The complete lines of `tail`, without their line ends. A last line without its newline is
    still being written, and (unless `whole`: the tail is the file's start) the first line may
    be cut: neither counts."""
    lines = tail.split(b"\n")[:-1]   # the part after the last newline is no complete line
    return [line.rstrip(b"\r") for line in (lines if whole else lines[1:])]


def last_statement(tail: bytes, whole: bool = True) -> str:
    """The last complete `busy`/`idle` line in `tail` ("" if none)."""
    for line in reversed(_complete_lines(tail, whole)):
        if _STATEMENT.fullmatch(line):
            return line[:4].decode()
    return ""


def last_progress(tail: bytes, whole: bool = True) -> tuple[int, int] | None:
    """The last complete, well-formed `progress DONE TOTAL` line in `tail` as (done, total):
    whole numbers with 0 <= DONE <= TOTAL and 1 <= TOTAL <= MAX_PROGRESS_TOTAL. Anything else
    (a line out of bounds too) is not a statement, and an earlier well-formed one counts."""
    for line in reversed(_complete_lines(tail, whole)):
        matched = _PROGRESS.fullmatch(line)
        if matched:
            done, total = int(matched.group(1)), int(matched.group(2))
            if 1 <= total <= MAX_PROGRESS_TOTAL and done <= total:
                return done, total
    return None
