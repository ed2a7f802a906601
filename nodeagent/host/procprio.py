"""libvirt's helper processes at volunteer priority: the one module that renices host processes.

libvirt 9.0 writes a save image (and reads it back on restore) through `libvirt_iohelper`, a
child of libvirtd, not of QEMU: it runs in libvirtd's cgroup at libvirtd's priority, outside the
domain's cgroup, so the domain's cpu.idle and block-I/O settings do not reach it. QEMU's own
migration thread (which reads the guest's memory and feeds the helper through a pipe) is in the
domain's cgroup and is already volunteer. The agent finds the helper serving its state file (its
command line names the file) and puts it in SCHED_IDLE (CPU: the same as cpu.idle, per task) and
the idle I/O class (which only bfq honours; under other schedulers the pipe from the volunteer
QEMU paces it). Nothing here touches any process but a libvirt_iohelper naming our file.
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

HELPER_COMM = "libvirt_iohelpe"   # the kernel's 15-character comm of /usr/lib/libvirt/libvirt_iohelper
_SYS_IOPRIO_SET = 251             # x86_64
_IOPRIO_WHO_PROCESS = 1
_IOPRIO_CLASS_IDLE = 3
_IOPRIO_CLASS_SHIFT = 13
_libc = ctypes.CDLL(None, use_errno=True)


def helpers_for(path: Path) -> list[int]:
    """The pids of libvirt_iohelper processes whose command line names `path`."""
    wanted = os.fsencode(str(path))
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/comm", "rb") as f:
                if f.read().strip() != HELPER_COMM.encode():
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if wanted in f.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue   # gone meanwhile
    return found


def make_idle(pid: int) -> list[str]:
    """SCHED_IDLE and the idle I/O class for `pid`; what was done (a process gone meanwhile: nothing)."""
    done = []
    try:
        os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
        done.append("cpu=SCHED_IDLE")
    except (ProcessLookupError, PermissionError):
        return done
    ioprio = _IOPRIO_CLASS_IDLE << _IOPRIO_CLASS_SHIFT
    if _libc.syscall(_SYS_IOPRIO_SET, _IOPRIO_WHO_PROCESS, pid, ioprio) == 0:
        done.append("io=idle")
    return done


def is_idle(pid: int) -> bool:
    """Whether `pid` runs in SCHED_IDLE (for tests and the bench)."""
    return os.sched_getscheduler(pid) == os.SCHED_IDLE
