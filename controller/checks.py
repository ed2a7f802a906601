"""Bounds on everything that reaches the controller: admins' requests and settings, and agents'
reports. Pure: a message or values in, checked values out, or InvalidField naming the field.
Nothing unchecked reaches the books or SQLite (whose integers stop at 2**63 - 1)."""
from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping
from typing import Any

from gleaner_common import ids
from gleaner_common.config import host_port_problem
from gleaner_common.ids import InvalidField, bounded
from protos import controller_pb2
from protos.words import VM_ROLE, from_wire

from .core.records import Reserve
from .core.records import INTERRUPTIONS, BackfillConfig, Policy
from .core.reserve_settings import ReserveError, ReserveSettings

MAX_VCPUS = 1024                      # one VM; no host we know of has more
MAX_MEMORY_MIB = 16 * 2**20           # 16 TiB
MIN_MEMORY_MIB = 96                   # the smallest guest that boots (the tiny image): any VM placed
MAX_NODE_CPUS = 4096
MAX_NODE_MEMORY_MIB = 64 * 2**20      # 64 TiB
MAX_REPORTED_VMS = 4096
MAX_REPORTED_IMAGES = 256
MAX_BACKFILL_INSTANCES = 1_000_000
MAX_DURATION_SECONDS = 10 * 365 * 86400
MAX_RETRY_SECONDS = 86400
MAX_GRACE_SECONDS = 3600
MAX_EVENTS = 1000
MAX_SEQ = 2**63 - 1
REPORT_ROLES = ("on_demand", "backfill")
CLOCK_SKEW_SECONDS = 86400            # a VM's launch time may be this far in the agent's future
BACKFILL_KEYS = {"enabled": bool, "max_instances": int, "image": str, "memory_mb": int, "vcpus": int,
                 "duration_seconds": int, "termination_policy": str, "retry_seconds": int, "grace_seconds": int,
                 "interruption": str, "hibernate_wait_seconds": int}
MAX_HIBERNATE_WAIT_SECONDS = 30 * 86400   # a month: past it, a saved job is better run again elsewhere
# The bounds of each number among the backfill settings, (low, high, unit): backfill() checks
# them and `gleanctl backfill set --help` prints them, so the help and the check cannot disagree.
BACKFILL_BOUNDS = {"max_instances": (0, MAX_BACKFILL_INSTANCES, ""), "vcpus": (1, 64, ""),
                   "memory_mb": (MIN_MEMORY_MIB, MAX_MEMORY_MIB, "MiB"),
                   "duration_seconds": (60, MAX_DURATION_SECONDS, "s"), "retry_seconds": (1, MAX_RETRY_SECONDS, "s"),
                   "grace_seconds": (0, MAX_GRACE_SECONDS, "s"),
                   "hibernate_wait_seconds": (60, MAX_HIBERNATE_WAIT_SECONDS, "s")}
RESERVE_KEYS = {"static_nodes": int, "predictive": str, "slot_seconds": int, "utc_offset_seconds": int,
                "wait_seconds": float, "lead_seconds": float, "max_waiting": int, "drain": bool}


class SettingError(ValueError):
    """A KEY=VALUE setting as typed (gleanctl backfill set, controller.sim --backfill) that does not parse."""


def request(vcpus: int, memory_mib: int, image: str, owner: str, request_id: str) -> None:
    bounded(vcpus, 1, MAX_VCPUS, "vcpus")
    memory(memory_mib, "memory_mib")
    ids.image(image)
    ids.person(owner, "owner")
    ids.request_id(request_id)


def memory(memory_mib: int, field: str) -> int:
    """A VM's memory: from the smallest a guest boots in (on-demand and backfill alike) to MAX."""
    if memory_mib < MIN_MEMORY_MIB:
        raise InvalidField(field, f"{memory_mib} MiB is less than {MIN_MEMORY_MIB} MiB, the least a guest "
                                  "boots in")
    return bounded(memory_mib, MIN_MEMORY_MIB, MAX_MEMORY_MIB, field, "MiB")


def backfill(current: BackfillConfig, changes: Mapping) -> BackfillConfig:
    """The current configuration with `changes` (set fields of SetBackfillRequest), each checked."""
    changes = dict(changes)
    if "termination_policy" in changes:
        try:
            changes["termination_policy"] = Policy(changes["termination_policy"])
        except ValueError:
            raise InvalidField("termination_policy", f"{str(changes['termination_policy'])[:40]!r} is not one of "
                               f"{', '.join(p.value for p in Policy)}") from None
    config = dataclasses.replace(current, **changes)
    for key, (low, high, unit) in BACKFILL_BOUNDS.items():
        if key == "memory_mb":
            memory(config.memory_mb, key)   # its own message below the floor
        else:
            bounded(getattr(config, key), low, high, key, unit)
    if config.interruption not in INTERRUPTIONS:
        raise InvalidField("interruption", f"{str(config.interruption)[:40]!r} is not one of {', '.join(INTERRUPTIONS)}")
    ids.image(config.image)
    return config


def reserve_settings(current: ReserveSettings, changes: Mapping[str, Any]) -> ReserveSettings:
    """The settings in force with `changes` (set fields of SetReserveSettingsRequest), checked by
    the reserves' own rules: InvalidField names the first field at fault."""
    try:
        return ReserveSettings.from_dict({**current.as_dict(), **changes})
    except ReserveError as exc:
        raise InvalidField(exc.field, str(exc).removeprefix(f"{exc.field}: ")) from None


def parse_backfill_setting(item: str) -> tuple[str, Any]:
    """One KEY=VALUE backfill setting, typed; its bounds are backfill()'s to check. Here, not in
    gleanctl, so the simulator can read the same settings without loading gRPC."""
    key, value = parse_setting(item, BACKFILL_KEYS)
    if isinstance(value, int) and not isinstance(value, bool) and value < 0:
        raise SettingError(f"{key}: must not be negative")
    return key, value


def parse_reserve_setting(item: str) -> tuple[str, Any]:
    """One KEY=VALUE [reserves] setting, typed (SettingError otherwise) and checked on its own by
    the reserves' rules (InvalidField names the field)."""
    key, value = parse_setting(item, RESERVE_KEYS)
    if key == "predictive":
        value = value.lower()   # as true/false are: DAY is day
    reserve_settings(ReserveSettings(), {key: value})
    return key, value


def parse_setting(item: str, keys: Mapping[str, type]) -> tuple[str, Any]:
    """KEY=VALUE with KEY one of `keys`, the value of the key's type (bool, int, float, str)."""
    key, sep, raw = item.partition("=")
    if not sep or key not in keys:
        raise SettingError(f"{item!r}: expected KEY=VALUE with KEY one of {', '.join(keys)}")
    kind = keys[key]
    if kind is bool:
        if raw.lower() not in ("true", "false", "on", "off", "yes", "no"):
            raise SettingError(f"{key}: expected true or false, not {raw!r}")
        return key, raw.lower() in ("true", "on", "yes")
    if kind in (int, float):
        try:
            return key, kind(raw)
        except ValueError:
            raise SettingError(f"{key}: expected {'a whole number' if kind is int else 'a number'}, "
                               f"not {raw!r}") from None
    return key, raw


def reserve(node_id: str, vcpus: int, memory_mib: int, whole_node: bool) -> Reserve:
    if node_id != "*":
        ids.node_id(node_id)
    bounded(vcpus, 0, MAX_NODE_CPUS, "vcpus")
    bounded(memory_mib, 0, MAX_NODE_MEMORY_MIB, "memory_mib", "MiB")
    return Reserve(node_id, vcpus, memory_mib, whole_node)


MAX_HINT_NODES = 1_000_000
MAX_HINT_HOURS = 8760                 # a year ahead, a year long


def hint(nodes: int, in_hours: float, for_hours: float, label: str) -> tuple[int, float, float, str]:
    """A reserve hint's fields, bounded (the ledger then checks them against the pool)."""
    bounded(nodes, 1, MAX_HINT_NODES, "nodes")
    bounded(in_hours, 0, MAX_HINT_HOURS, "in_hours", "h")
    bounded(for_hours, 0, MAX_HINT_HOURS, "for_hours", "h")
    if not for_hours > 0:
        raise InvalidField("for_hours", "the hint must last more than 0 hours")
    if label:
        ids.request_id(label, "label")
    return nodes, in_hours, for_hours, label


def hint_label(label: str) -> str:
    return ids.request_id(label, "label") if label else label


def events_query(after_seq: int, limit: int, kind: str) -> tuple[int, int, str]:
    bounded(after_seq, 0, MAX_SEQ, "after_seq")
    if kind and (len(kind) > 64 or not all(c.isalnum() or c in "._-" for c in kind)):
        raise InvalidField("kind", f"{kind[:64]!r} is not an event kind such as vm.preempted")
    return after_seq, min(limit, MAX_EVENTS) if limit else 100, kind


def _finite(value: float, low: float, high: float, field: str) -> float:
    if not math.isfinite(value) or not low <= value <= high:
        raise InvalidField(field, f"{value} is outside {low}..{high}")
    return value


def report(message, known: set | None = None) -> None:
    """An agent's report: every number within what the node itself describes (its CPUs and
    memory), every name by the shared rules. The node id was already bound to the caller.
    `known` holds the (name, lease id, image) of VMs this stream already had checked: their
    names are not checked again (a stream reports the same VMs every few seconds)."""
    ids.node_id(message.node_id, "node_id")
    agent_address(message.agent_address)
    cpus = bounded(message.cpus, 1, MAX_NODE_CPUS, "cpus")
    memory = bounded(message.memory_mib, 1, MAX_NODE_MEMORY_MIB, "memory_mib", "MiB")
    for name in ("cpu_busy_cores", "foreground_cpu_cores", "residual_cpu_cores"):
        _finite(getattr(message, name), 0.0, float(cpus), name)
    bounded(message.residual_memory_mib, 0, memory, "residual_memory_mib", "MiB")
    bounded(message.min_memory_mib, 0, memory, "min_memory_mib", "MiB")
    if len(message.agent_version) > 64:
        raise InvalidField("agent_version", "is longer than 64 characters")
    if len(message.images) > MAX_REPORTED_IMAGES:
        raise InvalidField("images", f"{len(message.images)} images; at most {MAX_REPORTED_IMAGES}")
    for image in message.images:
        ids.image(image, "images")
    if len(message.vms) > MAX_REPORTED_VMS:
        raise InvalidField("vms", f"{len(message.vms)} VMs; at most {MAX_REPORTED_VMS}")
    latest = time.time() + CLOCK_SKEW_SECONDS
    names = set()
    for vm in message.vms:
        if vm.name in names:
            raise InvalidField("vms.name", f"{vm.name[:80]!r} is reported twice")
        names.add(vm.name)
        identity = (vm.name, vm.lease_id, vm.image)
        if known is None or identity not in known:
            _check_vm_names(vm)
            if known is not None and len(known) < MAX_REPORTED_VMS:
                known.add(identity)
        _role_in_words(vm)
        bounded(vm.vcpus, 1, cpus, "vms.vcpus")
        bounded(vm.memory_mib, 1, memory, "vms.memory_mib", "MiB")
        _finite(vm.launched_at, 0.0, latest, "vms.launched_at")
        _finite(vm.cpu_cores, 0.0, float(cpus), "vms.cpu_cores")
        if len(vm.state) > 32:
            raise InvalidField("vms.state", "is longer than 32 characters")
        if vm.work_state not in ids.WORK_STATES:
            raise InvalidField("vms.work_state", f"{vm.work_state[:20]!r} is not one of ''"
                               + "".join(f", {s}" for s in ids.WORK_STATES if s))
        _finite(vm.work_for_s, 0.0, float(ids.MAX_WORK_AGE_SECONDS), "vms.work_for_s")
        _finite(getattr(vm, "slept_s", 0.0), 0.0, float(MAX_DURATION_SECONDS), "vms.slept_s")
        progress(vm, "vms")
    _hibernated(message, names, cpus, memory, latest)


# A guest's `progress DONE TOTAL` (its tenant's job, untrusted): 1 <= TOTAL <= this, 0 <= DONE <=
# TOTAL; 0/0 is "nothing said" (and what an older agent sends). The agent reads no more
# (nodeagent.host.workchannel.MAX_PROGRESS_TOTAL) and the sizing takes no more (job_progress.MAX_PROGRESS).
MAX_PROGRESS_TOTAL = 10**15


def progress(vm, prefix: str) -> tuple[int, int] | None:
    """A reported VM's progress fields within bounds: (done, total), or None when it said none.
    A report past them is refused whole, naming the field, as any other out-of-bounds report."""
    done, total = getattr(vm, "progress_done", 0), getattr(vm, "progress_total", 0)
    _finite(getattr(vm, "progress_for_s", 0.0), 0.0, float(ids.MAX_WORK_AGE_SECONDS), f"{prefix}.progress_for_s")
    bounded(total, 0, MAX_PROGRESS_TOTAL, f"{prefix}.progress_total")
    if total == 0:
        if done:
            raise InvalidField(f"{prefix}.progress_done", f"{done} without a progress_total (0/0 is nothing said)")
        return None
    if done > total:
        raise InvalidField(f"{prefix}.progress_done", f"{done} is outside 0..{total} (its progress_total)")
    return done, total


MAX_HIBERNATION_BYTES = 2**50   # a PiB: more disk than any node gives saved VMs


def _hibernated(message, names: set, cpus: int, memory: int, latest: float) -> None:
    """The hibernated VMs a report lists (never also running) and the node's hibernation disk
    figures: each within bounds, so a report cannot book a saved VM the node could not hold."""
    saved = getattr(message, "hibernated", ())
    if len(saved) > MAX_REPORTED_VMS:
        raise InvalidField("hibernated", f"{len(saved)} VMs; at most {MAX_REPORTED_VMS}")
    budget = bounded(getattr(message, "hibernation_budget_bytes", 0), 0, MAX_HIBERNATION_BYTES,
                     "hibernation_budget_bytes", "bytes")
    for name in ("hibernation_used_bytes", "hibernation_room_bytes"):
        bounded(getattr(message, name, 0), 0, MAX_HIBERNATION_BYTES, name, "bytes")
    for vm in saved:
        if vm.name in names:
            raise InvalidField("hibernated.name", f"{vm.name[:80]!r} is reported twice (running or hibernated)")
        names.add(vm.name)
        _check_vm_names(vm)
        try:
            role = from_wire(controller_pb2.VmRole, VM_ROLE, vm.vm_role) if vm.vm_role else ""
        except ValueError:
            role = ""
        if role != "backfill":
            raise InvalidField("hibernated.vm_role", f"{vm.vm_role}: only backfill VMs are hibernated")
        bounded(vm.vcpus, 1, cpus, "hibernated.vcpus")
        bounded(vm.memory_mib, 1, memory, "hibernated.memory_mib", "MiB")
        bounded(vm.state_bytes, 0, max(budget, vm.memory_mib << 21), "hibernated.state_bytes", "bytes")
        _finite(vm.launched_at, 0.0, latest, "hibernated.launched_at")
        _finite(vm.hibernated_at, 0.0, latest, "hibernated.hibernated_at")
        _finite(vm.slept_s, 0.0, float(MAX_DURATION_SECONDS), "hibernated.slept_s")
        if vm.work_state not in ids.WORK_STATES:
            raise InvalidField("hibernated.work_state", f"{vm.work_state[:20]!r} is not one of ''"
                               + "".join(f", {s}" for s in ids.WORK_STATES if s))
        _finite(vm.work_for_s, 0.0, float(ids.MAX_WORK_AGE_SECONDS), "hibernated.work_for_s")
        progress(vm, "hibernated")


def agent_address(address: str) -> str:
    """Where the controller dials a node: HOST:PORT and nothing else (host_port_problem), so a
    report cannot send it to a unix socket (unix:80 is ./80 to gRPC), a resolver or a path."""
    problem = host_port_problem(address)
    if problem:
        raise InvalidField("agent_address", f"{address[:80]!r} must be HOST:PORT: {problem}")
    return address


def _role_in_words(vm) -> None:
    """A reported VM's role, as its string (every release) and its enum (this one on): the enum,
    when set, is the word; a string that contradicts it is refused. The string is set from the
    enum when a sender left it empty, so the books read one field (mixed versions: docs)."""
    if vm.vm_role:
        try:
            word = from_wire(controller_pb2.VmRole, VM_ROLE, vm.vm_role)
        except ValueError:
            raise InvalidField("vms.vm_role", f"{vm.vm_role} is not a role this controller knows") from None
        if vm.role and vm.role != word:
            raise InvalidField("vms.role", f"{vm.role[:20]!r} contradicts vm_role {word!r}")
        vm.role = word
    if vm.role not in REPORT_ROLES:
        raise InvalidField("vms.role", f"{vm.role[:20]!r} is not one of {', '.join(REPORT_ROLES)}")


def _check_vm_names(vm) -> None:
    ids.vm_name(vm.name, "vms.name")
    if vm.lease_id:
        ids.lease_id(vm.lease_id, "vms.lease_id")
    if vm.image:
        ids.image(vm.image, "vms.image")
