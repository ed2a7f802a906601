"""virtlogd's files in the agent's console directory: the only module that removes them.

Each domain has a console log, `NAME.log`, and a backfill domain a work channel, `NAME.work`
(workchannel reads it); virtlogd rotates both at its max_size into `NAME.log.0`, `NAME.log.1` ...
A domain's work channel goes with the domain (nothing reads it afterwards). Its console log
stays for lifecycle.console_keep_seconds after virtlogd's last write: a guest's last words (a
kernel panic, a failed boot) are only there, and an admin may come back to them after a
weekend. Then the reaper removes it; before, every domain ever launched left its log behind.

The directory is the agent's: every regular file named `VMNAME.log` or `VMNAME.work` (with a
rotation number or not) counts as a domain's, whoever wrote it. Anything else (other names,
symlinks, directories, FIFOs) is never touched.
"""
from __future__ import annotations

import logging
import os
import re
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

from gleaner_common.ids import VM_NAME
from gleaner_common.logs import log_event

log = logging.getLogger(__name__)

CONSOLE = "log"
WORK = "work"
# A VM name, a kind, and virtlogd's rotation number if any
_FILE = re.compile(rf"(?P<name>{VM_NAME.pattern})\.(?P<kind>{CONSOLE}|{WORK})(?:\.[0-9]{{1,9}})?")


def console_path(console_dir: Path, name: str) -> Path:
    """Where virtlogd keeps domain `name`'s console log."""
    return console_dir / f"{name}.{CONSOLE}"


def domain_files(console_dir: Path, name: str, kinds: Iterable[str] = (CONSOLE, WORK)
                 ) -> list[tuple[Path, float]]:
    """Domain `name`'s regular files of these kinds, with their rotated copies: (path, mtime)."""
    found = []
    for kind in kinds:
        for path in console_dir.glob(f"{name}.{kind}*"):   # a name has no glob characters (VM_NAME)
            ours = _ours(path.name, path.lstat)
            if ours is not None and ours[0] == name:
                found.append((path, ours[1]))
    return sorted(found)


def remove_domain_files(console_dir: Path, name: str, kinds: Iterable[str]) -> int:
    """Delete domain `name`'s files of these kinds (CONSOLE, WORK) with their rotated copies;
    how many were deleted."""
    return remove_files(path for path, _mtime in domain_files(console_dir, name, kinds))


def expired_names(console_dir: Path, now: float, keep_seconds: float) -> list[str]:
    """The domain names whose files virtlogd last wrote more than `keep_seconds` before `now`
    (wall clock): the newest file counts, so a log being rotated is never half taken."""
    newest: dict[str, float] = {}
    try:
        entries = list(os.scandir(console_dir))
    except OSError:
        return []
    for entry in entries:
        ours = _ours(entry.name, lambda entry=entry: entry.stat(follow_symlinks=False))
        if ours is not None:
            name, mtime = ours
            newest[name] = max(newest.get(name, mtime), mtime)
    cutoff = now - keep_seconds
    return sorted(name for name, mtime in newest.items() if mtime < cutoff)


def remove_files(paths: Iterable[Path]) -> int:
    """Delete these files; how many were deleted. One already gone is no error; one that cannot
    be deleted (permissions, a read-only filesystem) is logged and left."""
    removed = 0
    for path in paths:
        try:
            path.unlink()
            removed += 1
        except FileNotFoundError:
            pass
        except OSError as exc:
            log_event(log, "console.remove_failed", logging.WARNING, path=str(path), error=str(exc))
    return removed


def _ours(file_name: str, lstat: Callable[[], os.stat_result]) -> tuple[str, float] | None:
    """(domain name, mtime) if `file_name` is a domain's file and a regular one (lstat: no
    symlink followed), else None (also when it was removed meanwhile)."""
    match = _FILE.fullmatch(file_name)
    if match is None:
        return None
    try:
        info = lstat()
    except OSError:
        return None
    return (match["name"], info.st_mtime) if stat.S_ISREG(info.st_mode) else None
