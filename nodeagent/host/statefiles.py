"""Hibernated domains' state files in the agent's hibernation directory: the only module that
reads, sizes or removes them (libvirtd writes them, on the agent's HibernateDomain).

Each hibernated domain has one file, `NAME.save`, written by libvirt's virDomainSaveFlags. The
file starts with libvirt's save header: its first 16 bytes are `LibvirtQemudPart` while the save
is under way and are rewritten to `LibvirtQemudSave` only once the whole image is on disk
(libvirt's qemu_saveimage.c), and libvirt refuses to restore a file that still says `Part`. So the
header tells a complete state file from a half-written one without asking libvirt.

The directory is the agent's alone (0700, root): the files are named by the agent after a domain
name that matched VM_NAME, so a path built here always names an entry right in the directory.
A file that is not a regular file (a symlink planted there, a FIFO) is never read or written
through, and is removed as debris; the directory itself must be a real directory, not a symlink,
so that libvirtd, which opens the path as root, writes nowhere else.
"""
from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from gleaner_common.ids import VM_NAME
from gleaner_common.logs import log_event

from .errors import HostRefused

log = logging.getLogger(__name__)
SUFFIX = ".save"
MAGIC_COMPLETE = b"LibvirtQemudSave"
MAGIC_PARTIAL = b"LibvirtQemudPart"
MIB = 2**20


class StateDirUnsafe(HostRefused):
    """The hibernation directory is not a plain directory the agent alone can write: nothing is
    saved into it (FAILED_PRECONDITION)."""


class Kind(str, Enum):
    COMPLETE = "complete"   # a whole save image: the domain can be restored from it
    PARTIAL = "partial"     # a save under way, or one that never finished
    FOREIGN = "foreign"     # not a libvirt save image, or not a regular file: debris


@dataclass(frozen=True)
class StateFile:
    name: str          # the domain's
    path: Path
    kind: Kind
    size: int          # bytes on disk (allocated), what it costs the disk
    mtime: float       # when it was last written: a complete file's save finished then


def state_path(directory: Path, name: str) -> Path:
    """Where domain `name`'s state file goes; `name` must be a VM name (no '/', no '..')."""
    if not VM_NAME.fullmatch(name):
        raise ValueError(f"not a VM name: {name!r}")
    return directory / f"{name}{SUFFIX}"


def check_directory(directory: Path) -> None:
    """Refuse (StateDirUnsafe) a hibernation directory that is a symlink, not a directory, or
    writable by anyone but its owner: libvirtd would follow such a path as root."""
    try:
        info = os.lstat(directory)
    except FileNotFoundError:
        raise StateDirUnsafe(f"the hibernation directory {directory} does not exist") from None
    if stat.S_ISLNK(info.st_mode):
        raise StateDirUnsafe(f"the hibernation directory {directory} is a symlink; it must be a plain directory")
    if not stat.S_ISDIR(info.st_mode):
        raise StateDirUnsafe(f"the hibernation directory {directory} is not a directory")
    if info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise StateDirUnsafe(f"the hibernation directory {directory} must belong to the agent's user and be "
                             f"writable by it alone (mode {stat.S_IMODE(info.st_mode):o}, owner uid {info.st_uid})")


def make_directory(directory: Path) -> None:
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not directory.is_symlink():
        directory.chmod(0o700)


def read_state_file(directory: Path, name: str) -> StateFile | None:
    """Domain `name`'s state file as it is now, or None if there is none. Never follows a symlink."""
    path = state_path(directory, name)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        return None
    except OSError:   # a symlink (ELOOP) or something unreadable: debris in our directory
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return None
        return StateFile(name, path, Kind.FOREIGN, 0, info.st_mtime)
    try:
        info = os.fstat(fd)
        magic = os.pread(fd, len(MAGIC_COMPLETE), 0) if stat.S_ISREG(info.st_mode) else b""
    finally:
        os.close(fd)
    kind = {MAGIC_COMPLETE: Kind.COMPLETE, MAGIC_PARTIAL: Kind.PARTIAL}.get(magic, Kind.FOREIGN)
    if stat.S_ISREG(info.st_mode) and magic == b"":
        kind = Kind.PARTIAL   # created, header not written yet: a save that has just begun
    return StateFile(name, path, kind, info.st_blocks * 512, info.st_mtime)


def list_state_files(directory: Path) -> dict[str, StateFile]:
    """Every NAME.save in the directory, by domain name (other entries are not ours to judge)."""
    try:
        entries = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return {}
    found = {}
    for entry in entries:
        name = entry[:-len(SUFFIX)] if entry.endswith(SUFFIX) else ""
        if name and VM_NAME.fullmatch(name):
            item = read_state_file(directory, name)
            if item is not None:
                found[name] = item
    return found


def clear_path(directory: Path, name: str) -> None:
    """Before a save: a regular file left at the state file's path (a save that never finished)
    goes, so libvirtd creates a fresh one. Anything else there (a symlink, a FIFO, a directory) was
    planted in a directory only the agent's user can write: the save is refused (StateDirUnsafe),
    nothing is followed, and the reaper's next pass removes it."""
    path = state_path(directory, name)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(info.st_mode):
        raise StateDirUnsafe(f"{path} is a {'symlink' if stat.S_ISLNK(info.st_mode) else 'special file'}, not a "
                             "state file: someone put it there; nothing was saved")
    log_event(log, "hibernate.leftover_removed", logging.WARNING, domain=name, path=str(path), bytes=info.st_size,
              note="a file from an earlier save that never finished; removed before the save")
    delete(directory, name)


def delete(directory: Path, name: str) -> int:
    """Remove domain `name`'s state file (the entry itself, a symlink is not followed); the bytes freed."""
    path = state_path(directory, name)
    try:
        info = os.lstat(path)
        os.unlink(path)
    except FileNotFoundError:
        return 0
    return info.st_blocks * 512 if stat.S_ISREG(info.st_mode) else 0


def used_bytes(directory: Path) -> int:
    """What the state files take on disk now."""
    return sum(item.size for item in list_state_files(directory).values())


def free_bytes(directory: Path) -> int:
    """Free space an unprivileged writer may use on the directory's filesystem."""
    try:
        vfs = os.statvfs(directory)
    except OSError:
        return 0
    return vfs.f_bavail * vfs.f_frsize
