"""Plain records the host modules are handed: what a domain is made of, what the kernel
offers, and what a priority class sets on CPU, disk and network.

They live here, below everything, so that the host modules import nothing from above them and
the pure rules (nodeagent/priority.py) and validation can name them without loading any module
that touches the host. No I/O: dataclasses only.
"""
from __future__ import annotations

from dataclasses import dataclass

from gleaner_common.vocabulary import PriorityClass


@dataclass(frozen=True)
class LaunchSpec:
    """A validated request to launch a domain (nodeagent/validation.py makes them)."""

    name: str
    role: PriorityClass   # the class it is launched in (the wire's and the metadata's "role")
    vcpus: int
    memory_mib: int
    image: str
    kernel_cmdline: str = ""
    lease_id: str = ""
    cpuset: str = ""
    retire_after_seconds: int = 0   # told to the guest (gleaner.retire_after); 0: not told
    work_channel: bool = False      # a foreground domain given the work channel (volunteers always have it)

    @property
    def has_work_channel(self) -> bool:
        return gets_work_channel(self.role, self.work_channel)


def gets_work_channel(role: PriorityClass, asked: bool) -> bool:
    """A volunteer always has the work channel; a foreground domain only when its launch asked."""
    return role is PriorityClass.VOLUNTEER or asked


@dataclass(frozen=True)
class CgroupFacts:
    version: int        # 1 or 2
    cpu_idle: bool      # the kernel offers cpu.idle (SCHED_IDLE for a whole group)


@dataclass(frozen=True)
class CpuSetting:
    """What a domain's cgroup should say: idle, or not idle with a weight.

    `weight` is in the version's own unit: cpu.shares on v1, cpu.weight on v2. It is not
    written (nor compared) while idle is set, since the kernel owns it then.
    """

    idle: bool
    weight: int


@dataclass(frozen=True)
class DiskSetting:
    weight: int
    total_bytes_sec: int  # 0: uncapped
    total_iops_sec: int   # 0: uncapped


@dataclass(frozen=True)
class NetCap:
    """Caps on a tap in bytes per second; 0 means unshaped."""

    to_guest: int = 0
    from_guest: int = 0
