"""virtlogd's files in the agent's console directory: the only module that removes them.

Each domain has a console log, `NAME.log`, and a backfill domain a work channel, `NAME.work`
(workchannel reads it); virtlogd rotates both at its max_size into `NAME.log.0`, `NAME.log.1` ...
A domain's work channel goes with the domain (nothing reads it afterwards). Its console log
stays for lifecycle.console_keep_seconds after virtlogd's last write: a guest's last words (a
kernel panic, a failed boot) are only there, and an admin may come back to them after a
weekend. Then the reaper removes it; before, every domain ever launched left its log behind.

Age alone does not bound the directory: backfill VMs may be recycled every minute, and a chatty
guest fills its log to virtlogd's max_size. So the directory also has a byte budget
(lifecycle.console_budget_mib): over it, the files of ended domains go, the domain whose last
line is oldest first (over_budget); a running domain's files are never removed (virtlogd holds
them open, and its guest's words are still being written).

The directory is the agent's: every regular file named `VMNAME.log` or `VMNAME.work` (with a
rotation number or not) counts as a domain's, whoever wrote it. Anything else (other names,
symlinks, directories, FIFOs) is never touched.
"""
from __future__ import annotations

import logging
import os
import re
import stat
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
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


@dataclass(frozen=True)
class DomainLogs:
    """One domain's files in the directory, as a scan found them."""
    name: str
    files: tuple[tuple[Path, int], ...]   # (path, size in bytes)
    newest: float                         # the mtime of its newest file: when it last wrote

    @property
    def size(self) -> int:
        return sum(size for _path, size in self.files)


def domain_files(console_dir: Path, name: str, kinds: Iterable[str] = (CONSOLE, WORK)
                 ) -> list[tuple[Path, float]]:
    """Domain `name`'s regular files of these kinds, with their rotated copies: (path, mtime)."""
    return sorted((path, info.st_mtime) for path, info in _domain_entries(console_dir, name, kinds))


def domain_logs(console_dir: Path, name: str) -> DomainLogs | None:
    """Domain `name`'s files of every kind with their sizes, None if it has none."""
    entries = sorted(_domain_entries(console_dir, name, (CONSOLE, WORK)))
    if not entries:
        return None
    return DomainLogs(name, tuple((path, info.st_size) for path, info in entries),
                      max(info.st_mtime for _path, info in entries))


def _domain_entries(console_dir: Path, name: str, kinds: Iterable[str]) -> list[tuple[Path, os.stat_result]]:
    found = []
    for kind in kinds:
        for path in console_dir.glob(f"{name}.{kind}*"):   # a name has no glob characters (VM_NAME)
            ours = _ours(path.name, path.lstat)
            if ours is not None and ours[0] == name:
                found.append((path, ours[1]))
    return found


def all_logs(console_dir: Path) -> list[DomainLogs]:
    """Every domain's files in the directory, in one scan: the domain that wrote last the longest
    ago first. A missing directory has none."""
    files: dict[str, list[tuple[Path, os.stat_result]]] = {}
    try:
        entries = list(os.scandir(console_dir))
    except OSError:
        return []
    for entry in entries:
        ours = _ours(entry.name, lambda entry=entry: entry.stat(follow_symlinks=False))
        if ours is not None:
            files.setdefault(ours[0], []).append((Path(entry.path), ours[1]))
    logs = [DomainLogs(name, tuple((path, info.st_size) for path, info in sorted(found)),
                       max(info.st_mtime for _path, info in found)) for name, found in files.items()]
    return sorted(logs, key=lambda item: (item.newest, item.name))


def over_budget(logs: list[DomainLogs], budget_bytes: int, running: Collection[str]) -> list[DomainLogs]:
    """Which domains' files to remove, oldest first, to bring the directory within budget_bytes:
    never a running domain's. Fewer than needed (or none) when running domains' files alone
    exceed the budget."""
    total = sum(item.size for item in logs)
    chosen = []
    for item in sorted(logs, key=lambda item: (item.newest, item.name)):
        if total <= budget_bytes:
            break
        if item.name not in running:
            chosen.append(item)
            total -= item.size
    return chosen


def remove_domain_files(console_dir: Path, name: str, kinds: Iterable[str]) -> int:
    """Delete domain `name`'s files of these kinds (CONSOLE, WORK) with their rotated copies;
    how many were deleted."""
    return remove_files(path for path, _mtime in domain_files(console_dir, name, kinds))


def expired_names(console_dir: Path, now: float, keep_seconds: float) -> list[str]:
    """The domain names whose files virtlogd last wrote more than `keep_seconds` before `now`
    (wall clock): the newest file counts, so a log being rotated is never half taken."""
    cutoff = now - keep_seconds
    return sorted(item.name for item in all_logs(console_dir) if item.newest < cutoff)


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


def _ours(file_name: str, lstat: Callable[[], os.stat_result]) -> tuple[str, os.stat_result] | None:
    """(domain name, its lstat) if `file_name` is a domain's file and a regular one (no symlink
    followed), else None (also when it was removed meanwhile)."""
    match = _FILE.fullmatch(file_name)
    if match is None:
        return None
    try:
        info = lstat()
    except OSError:
        return None
    return (match["name"], info) if stat.S_ISREG(info.st_mode) else None
