"""What kind of failure a host error is, whichever part raised it (libvirt, qemu-img, files).

The gRPC server answers each kind with the status code gRPC intends for it (nodeagent/server.py);
what is none of these kinds is a bug, answered INTERNAL."""
from __future__ import annotations

import errno
import os

# How the kernel words running out (qemu-img's stderr and libvirt's messages carry them)
_EXHAUSTED = tuple(os.strerror(code) for code in (errno.ENOSPC, errno.ENOMEM, errno.EDQUOT))


def says_exhausted(message: str) -> bool:
    """Whether an error message carries the kernel's "no space" or "cannot allocate memory"."""
    return any(words in message for words in _EXHAUSTED)


class HostUnavailable(RuntimeError):
    """The hypervisor cannot be reached now (libvirtd restarting, a lost connection, a timeout):
    the same call may succeed later. UNAVAILABLE."""


class HostExhausted(RuntimeError):
    """The host lacks the memory or disk space for it. RESOURCE_EXHAUSTED."""


class HostRefused(RuntimeError):
    """The host, an image or the domain is not in a state for it (a guest that cannot start, a
    corrupt image, a domain in the wrong state). FAILED_PRECONDITION."""
