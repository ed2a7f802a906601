"""virtlogd's files in the agent's console directory: the only module that removes them.

Each domain has a console log, `NAME.log`, and a backfill domain a work channel, `NAME.work`
(workchannel reads it); virtlogd rotates both at its max_size into `NAME.log.0`, `NAME.log.1` ...
A domain's work channel goes with the domain (nothing reads it afterwards). Its console log
stays for lifecycle.console_keep_seconds after virtlogd's last write: a guest's last words (a
kernel panic, a failed boot) are only there, and an admin may come back to them after a
weekend. Then the reaper removes it; before, every domain ever launched left its log behind.

Only regular files whose names are a domain's name and one of those endings are touched:
anything else in the directory (a symlink, a directory, notes) was put there by hand.
"""
from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path

CONSOLE = "log"
WORK = "work"
# A VM name (gleaner_common.ids.VM_NAME), a kind, and virtlogd's rotation number if any
_FILE = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9_-]{0,62})\.(?P<kind>log|work)(?:\.[0-9]{1,9})?")


def console_path(console_dir: Path, name: str) -> Path:
    """Where virtlogd keeps domain `name`'s console log."""
    return console_dir / f"{name}.{CONSOLE}"


def remove_domain_files(console_dir: Path, name: str, kinds: Iterable[str]) -> None:
    """Delete domain `name`'s files of these kinds (CONSOLE, WORK) with their rotated copies."""
    wanted = set(kinds)
    for path in _domain_files(console_dir, name):
        if _FILE.fullmatch(path.name)["kind"] in wanted:
            _unlink(path)


def expired_files(console_dir: Path, now: float, keep_seconds: float) -> dict[str, list[Path]]:
    """Per domain name, its files when virtlogd last wrote any of them more than `keep_seconds`
    before `now` (wall clock): the newest counts, so a log being rotated is never half taken."""
    newest: dict[str, float] = {}
    files: dict[str, list[Path]] = {}
    for name, path, info in _scan(console_dir):
        files.setdefault(name, []).append(path)
        newest[name] = max(newest.get(name, info.st_mtime), info.st_mtime)
    cutoff = now - keep_seconds
    return {name: sorted(paths) for name, paths in sorted(files.items()) if newest[name] < cutoff}


def remove_files(paths: Iterable[Path]) -> int:
    """Delete these files (gone already is no error); how many were deleted."""
    return sum(_unlink(path) for path in paths)


def _domain_files(console_dir: Path, name: str) -> list[Path]:
    return [path for file_name, path, _info in _scan(console_dir) if file_name == name]


def _scan(console_dir: Path) -> Iterable[tuple[str, Path, os.stat_result]]:
    """(domain name, path, lstat) of each regular file of ours in the directory."""
    try:
        entries = list(os.scandir(console_dir))
    except OSError:
        return []
    found = []
    for entry in entries:
        match = _FILE.fullmatch(entry.name)
        if match is None:
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:   # removed meanwhile
            continue
        if stat.S_ISREG(info.st_mode):
            found.append((match["name"], Path(entry.path), info))
    return found


def _unlink(path: Path) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True
