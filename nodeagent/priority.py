"""Priority classes: what each class means for a domain's CPU, as plain data.

Pure: given the class, what the kernel offers (CgroupFacts) and the configured weights,
say what the domain's cgroup and libvirt's <shares> should be. The agent applies it.
"""
from __future__ import annotations

from dataclasses import dataclass

from .cgroups import CgroupFacts, CpuSetting
from .validation import Role


@dataclass(frozen=True)
class CpuWeights:
    """cgroup weights per class, in each version's unit. v1 cpu.shares runs 2..262144
    (default 1024); v2 cpu.weight runs 1..10000 (default 100)."""

    foreground_v1: int = 1024
    foreground_v2: int = 100
    volunteer_v1: int = 2
    volunteer_v2: int = 1
    use_cpu_idle: bool = True


def cpu_setting(cls: Role, facts: CgroupFacts, weights: CpuWeights) -> CpuSetting:
    """Foreground: a normal weight. Volunteer: cpu.idle where the kernel has it (a waking
    foreground task then always preempts it), else the lowest weight."""
    v2 = facts.version == 2
    if cls is Role.FOREGROUND:
        return CpuSetting(idle=False, weight=weights.foreground_v2 if v2 else weights.foreground_v1)
    return CpuSetting(idle=facts.cpu_idle and weights.use_cpu_idle,
                      weight=weights.volunteer_v2 if v2 else weights.volunteer_v1)


def libvirt_shares(setting: CpuSetting) -> int:
    """The <cputune><shares> libvirt writes at start: verbatim to cpu.shares on v1 and to
    cpu.weight on v2, so it is already in the right unit. Under idle it is the fallback
    weight, in force for the moment between start and the agent setting idle."""
    return setting.weight
