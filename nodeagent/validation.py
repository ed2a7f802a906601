"""Validation of every field a client sends to the agent. Pure: plain values in, plain values or
errors out. The id and name rules shared with the controller and gleanctl are gleaner_common.ids."""
from __future__ import annotations

import re
from dataclasses import dataclass

from gleaner_common import ids
from gleaner_common.ids import InvalidField
from gleaner_common.vocabulary import PriorityClass

from .host.errors import HostExhausted
from .host.settings import LaunchSpec


# Kernel options are words of safe characters: no quotes, no shell or XML metacharacters.
CMDLINE_RE = re.compile(r"[A-Za-z0-9 ._,=:/+-]*")
CMDLINE_MAX = 512
MIN_MEMORY_MIB = 32
MAX_GRACE_SECONDS = 3600
MAX_RETIRE_AFTER_SECONDS = 10 * 365 * 86400   # the controller's longest backfill life (duration_seconds)


@dataclass(frozen=True)
class HostLimits:
    cpus: int
    memory_mib: int


class BeyondHost(InvalidField, HostExhausted):
    """More CPUs or memory than this host has: the request is well formed, but this host cannot
    give it (RESOURCE_EXHAUSTED, still naming the field)."""


def validate_name(name: str, field: str = "name") -> str:
    return ids.vm_name(name, field)


def validate_role(role: str | PriorityClass | None) -> PriorityClass:
    try:
        return PriorityClass(role)
    except ValueError:
        raise InvalidField("role", f"must be 'foreground' or 'volunteer', not {role!r}") from None


def validate_vcpus(vcpus: int, limits: HostLimits) -> int:
    if not 1 <= vcpus <= limits.cpus:
        raise (BeyondHost if vcpus > limits.cpus else InvalidField)(
            "vcpus", f"{vcpus} is outside 1..{limits.cpus} (this host's CPUs)")
    return vcpus


def validate_memory(memory_mib: int, limits: HostLimits) -> int:
    if not MIN_MEMORY_MIB <= memory_mib <= limits.memory_mib:
        raise (BeyondHost if memory_mib > limits.memory_mib else InvalidField)(
            "memory_mib", f"{memory_mib} MiB is outside {MIN_MEMORY_MIB}..{limits.memory_mib} MiB (this host's memory)")
    return memory_mib


def validate_cmdline(cmdline: str) -> str:
    if len(cmdline) > CMDLINE_MAX:
        raise InvalidField("kernel_cmdline", f"is {len(cmdline)} characters; at most {CMDLINE_MAX}")
    if not CMDLINE_RE.fullmatch(cmdline):
        bad = sorted({c for c in cmdline if not CMDLINE_RE.fullmatch(c)})
        raise InvalidField("kernel_cmdline", f"has characters outside the allowed set: {''.join(bad)!r}")
    return " ".join(cmdline.split())


def validate_retire_after(seconds: int, role: PriorityClass) -> int:
    """Seconds of run time after which a volunteer's controller recycles it (0: not told)."""
    if not 0 <= seconds <= MAX_RETIRE_AFTER_SECONDS:
        raise InvalidField("retire_after_seconds", f"{seconds} is outside 0..{MAX_RETIRE_AFTER_SECONDS} (ten years)")
    if seconds and role is not PriorityClass.VOLUNTEER:
        raise InvalidField("retire_after_seconds", "only volunteer domains are recycled; a foreground one is "
                                                   "released by its owner")
    return seconds


def validate_work_channel(work_channel: bool) -> bool:
    """Whether a foreground domain gets the work channel (a goal's dedicated VM): a bool."""
    if not isinstance(work_channel, bool):
        raise InvalidField("work_channel", f"{work_channel!r} is not true or false")
    return work_channel


def validate_lease_id(lease_id: str) -> str:
    return ids.lease_id(lease_id) if lease_id else lease_id


CPUSET_RE = re.compile(r"\d{1,4}(-\d{1,4})?(,\d{1,4}(-\d{1,4})?)*")


def cpuset_cpus(cpuset: str) -> set[int]:
    """The CPU numbers in a cpuset such as '0-2,5'."""
    cpus: set[int] = set()
    for part in cpuset.split(","):
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def validate_cpuset(cpuset: str, limits: HostLimits) -> str:
    if not cpuset:
        return ""
    if not CPUSET_RE.fullmatch(cpuset):
        raise InvalidField("cpuset", f"{cpuset!r} is not a CPU list such as '1' or '0-1,3'")
    cpus = cpuset_cpus(cpuset)
    for part in cpuset.split(","):
        low, _, high = part.partition("-")
        if high and int(high) < int(low):
            raise InvalidField("cpuset", f"range {part!r} runs backwards")
    if max(cpus) >= limits.cpus:
        raise InvalidField("cpuset", f"CPU {max(cpus)} does not exist; this host has CPUs 0-{limits.cpus - 1}")
    return cpuset


def validate_grace(grace_seconds: int) -> int:
    if not 0 <= grace_seconds <= MAX_GRACE_SECONDS:
        raise InvalidField("grace_seconds", f"{grace_seconds} is outside 0..{MAX_GRACE_SECONDS}")
    return grace_seconds


def validate_launch(name: str, role: str | PriorityClass | None, vcpus: int, memory_mib: int, image: str,
                    kernel_cmdline: str, lease_id: str, limits: HostLimits, cpuset: str = "",
                    retire_after_seconds: int = 0, work_channel: bool = False) -> LaunchSpec:
    """Check every field of a launch request; the first bad one raises InvalidField."""
    checked_role = validate_role(role)
    return LaunchSpec(
        name=validate_name(name),
        role=checked_role,
        vcpus=validate_vcpus(vcpus, limits),
        memory_mib=validate_memory(memory_mib, limits),
        image=ids.image(image),
        kernel_cmdline=validate_cmdline(kernel_cmdline),
        lease_id=validate_lease_id(lease_id),
        cpuset=validate_cpuset(cpuset, limits),
        retire_after_seconds=validate_retire_after(retire_after_seconds, checked_role),
        work_channel=validate_work_channel(work_channel),
    )
