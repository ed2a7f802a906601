"""The one module that reads block-device facts from sysfs: which I/O scheduler serves a path.

Block-I/O weights only act under BFQ; under mq-deadline, kyber or none they are ignored,
so the agent must know which one serves the disks its domains write to.
"""
from __future__ import annotations

import os
from pathlib import Path


def device_of(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return os.major(st.st_dev), os.minor(st.st_dev)


def scheduler_of(path: Path, sys_root: Path = Path("/sys")) -> str:
    """The active I/O scheduler of the disk holding `path` ("bfq", "mq-deadline", "none", ...),
    or "unknown" when sysfs cannot say (a device-mapper or network filesystem, say)."""
    major, minor = device_of(path)
    device = sys_root / "dev" / "block" / f"{major}:{minor}"
    if not device.exists():
        return "unknown"
    device = device.resolve()
    if (device / "partition").exists():  # a partition's queue belongs to its disk
        device = device.parent
    try:
        text = (device / "queue" / "scheduler").read_text()
    except FileNotFoundError:
        return "unknown"
    return parse_scheduler(text)


def parse_scheduler(text: str) -> str:
    """'none [mq-deadline] kyber bfq' -> 'mq-deadline'."""
    for word in text.split():
        if word.startswith("[") and word.endswith("]"):
            return word[1:-1]
    words = text.split()
    return words[0] if len(words) == 1 else "unknown"
