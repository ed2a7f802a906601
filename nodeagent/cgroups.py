"""The one module that reads and writes cgroupfs. Its root is configurable so tests can
point it at a fake cgroupfs in a temporary directory."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CgroupFacts:
    version: int        # 1 or 2
    cpu_idle: bool      # the kernel offers cpu.idle (SCHED_IDLE for a whole group)


def _cpu_dir(root: Path, version: int) -> Path:
    return root if version == 2 else root / "cpu"


def detect(root: Path) -> CgroupFacts:
    """Which cgroup version is mounted at root, and whether cpu.idle exists.

    cpu.idle is absent from the root group by design, so child groups are looked at too.
    """
    version = 2 if (root / "cgroup.controllers").is_file() else 1
    cpu_dir = _cpu_dir(root, version)
    candidates = [cpu_dir, *(p for p in cpu_dir.iterdir() if p.is_dir())] if cpu_dir.is_dir() else []
    return CgroupFacts(version=version, cpu_idle=any((p / "cpu.idle").is_file() for p in candidates))
