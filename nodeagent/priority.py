"""Priority classes: what each class means for a domain's CPU, as plain data.

Pure: given the class, what the kernel offers (CgroupFacts) and the configured weights,
say what the domain's cgroup and libvirt's <shares> should be. The agent applies it.
"""
from __future__ import annotations

from dataclasses import dataclass

from gleaner_common.vocabulary import PriorityClass

from .host.settings import CgroupFacts, CpuSetting, DiskSetting, NetCap


@dataclass(frozen=True)
class CpuWeights:
    """cgroup weights per class, in each version's unit. v1 cpu.shares runs 2..262144
    (default 1024); v2 cpu.weight runs 1..10000 (default 100)."""

    foreground_v1: int = 1024
    foreground_v2: int = 100
    volunteer_v1: int = 2
    volunteer_v2: int = 1
    use_cpu_idle: bool = True


def cpu_setting(cls: PriorityClass, facts: CgroupFacts, weights: CpuWeights) -> CpuSetting:
    """Foreground: a normal weight. Volunteer: cpu.idle where the kernel has it (a waking
    foreground task then always preempts it), else the lowest weight."""
    v2 = facts.version == 2
    if cls is PriorityClass.FOREGROUND:
        return CpuSetting(idle=False, weight=weights.foreground_v2 if v2 else weights.foreground_v1)
    return CpuSetting(idle=facts.cpu_idle and weights.use_cpu_idle,
                      weight=weights.volunteer_v2 if v2 else weights.volunteer_v1)


def launch_shares(facts: CgroupFacts, weights: CpuWeights) -> int:
    """The <cputune><shares> every domain starts with, whatever its class: the normal weight.

    libvirt writes it to the cgroup before QEMU starts (verbatim: cpu.shares on v1,
    cpu.weight on v2). A volunteer's own class is applied the moment start returns. Starting
    at minimal weight would starve QEMU's start-up on a busy host: libvirt's start then
    blocks for minutes waiting on QEMU's monitor, or fails outright."""
    return cpu_setting(PriorityClass.FOREGROUND, facts, weights).weight


@dataclass(frozen=True)
class DiskPolicy:
    """Block-I/O weights (libvirt's <blkiotune> range, 100..1000) and the caps volunteers get
    where weights have no effect. A cap of 0 means none."""

    foreground_weight: int = 1000
    volunteer_weight: int = 100
    volunteer_bytes_per_second: int = 20 * 2**20
    volunteer_iops: int = 200


def disk_mechanism(scheduler: str) -> str:
    """How volunteers are held back on disk: by weights under BFQ, which honours them;
    by throughput and IOPS caps anywhere else (mq-deadline, kyber and none ignore weights)."""
    return "weights" if scheduler == "bfq" else "caps"


def disk_setting(cls: PriorityClass, mechanism: str, policy: DiskPolicy) -> DiskSetting:
    if cls is PriorityClass.FOREGROUND:
        return DiskSetting(policy.foreground_weight, 0, 0)  # foreground I/O is never capped
    if mechanism == "caps":
        return DiskSetting(policy.volunteer_weight, policy.volunteer_bytes_per_second, policy.volunteer_iops)
    return DiskSetting(policy.volunteer_weight, 0, 0)


def net_cap(cls: PriorityClass, to_guest: int, from_guest: int) -> NetCap:
    """Foreground traffic is never shaped; volunteers get the configured caps."""
    return NetCap() if cls is PriorityClass.FOREGROUND else NetCap(to_guest, from_guest)
