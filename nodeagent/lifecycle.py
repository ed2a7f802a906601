"""Domain lifecycle: launch, list, terminate, and cleaning up after volunteers.

This module holds the agent's behaviour; it reaches libvirt only through Hypervisor,
disks only through images, and keeps no state of its own beyond locks: everything it
knows about a domain is in the domain's metadata.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Iterator

import psutil
from pyroute2.netlink.exceptions import NetlinkError

from gleaner_common import __version__
from gleaner_common.ids import InvalidField
from gleaner_common.logs import log_event

from . import blockdev, cgroups, netshape
from .config import AgentConfig
from .domainxml import (DISK_TARGET, NAMESPACE, PREFIX, DomainShape, GleanerMetadata, build_domain_xml,
                        metadata_xml, read_metadata, read_shape)
from .events import Event, EventBus
from .hypervisor import DomainRecord, HostFacts, Hypervisor, HypervisorError, NoSuchDomain, is_active_state
from .images import (OverlayError, create_overlay, delete_overlay, list_overlays, overlay_path,
                     resolve_image)
from .metrics import DomainCounters, DomainInfo
from .priority import DiskSetting, disk_mechanism, disk_setting, launch_shares, net_cap
from .priorityctl import PriorityController
from .validation import HostLimits, LaunchSpec, Role, validate_grace

log = logging.getLogger(__name__)
POLL_SECONDS = 0.05
PROGRESS_SECONDS = 5.0
# libvirt's events say when a domain's XML may have changed, so reconcile re-reads only
# those; every this many passes it re-reads all of them anyway, in case one was missed.
FULL_REFRESH_PASSES = 30


class DomainNotFound(LookupError):
    pass


class NotManaged(PermissionError):
    """The domain exists but Gleaner did not launch it: the agent will not touch it."""


class DomainConflict(RuntimeError):
    """A domain of that name exists with another spec."""


class LaunchFailed(RuntimeError):
    """libvirt or qemu-img failed part-way; everything the launch made was removed."""


class TerminationOutcome(str, Enum):
    CLEAN_SHUTDOWN = "clean_shutdown"
    DESTROYED_AFTER_GRACE = "destroyed_after_grace"
    DESTROYED_FORCED = "destroyed_forced"
    ALREADY_STOPPED = "already_stopped"


@dataclass(frozen=True)
class ManagedDomain:
    name: str
    uuid: str
    role: Role
    state: str
    vcpus: int
    memory_mib: int
    launched_at: datetime
    lease_id: str
    cpu_time_ns: int
    image: str
    kernel_cmdline: str
    console_log: str
    cpuset: str = ""
    priority_class: Role = Role.FOREGROUND
    boosted: bool = False


@dataclass(frozen=True)
class TerminationResult:
    name: str
    outcome: TerminationOutcome
    duration_seconds: float
    detail: str


@dataclass(frozen=True)
class HostDescription:
    facts: HostFacts
    cgroup: cgroups.CgroupFacts
    disk_scheduler: str
    disk_mechanism: str
    domain_type: str
    libvirt_uri: str
    agent_version: str
    managed_domains: int


def managed_domain(record: DomainRecord, meta: GleanerMetadata, boosted: bool = False) -> ManagedDomain:
    shape = read_shape(record.xml)
    return ManagedDomain(name=record.name, uuid=record.uuid, role=meta.role, state=record.state,
                         vcpus=shape.vcpus, memory_mib=shape.memory_mib, launched_at=meta.launched_at,
                         lease_id=meta.lease_id, cpu_time_ns=record.cpu_time_ns, image=meta.image,
                         kernel_cmdline=meta.kernel_cmdline, console_log=shape.console_log, cpuset=shape.cpuset,
                         priority_class=meta.priority_class, boosted=boosted)


def choose_domain_type(configured: str, kvm_usable: bool) -> str:
    """The libvirt domain type to launch with: `auto` means KVM only when it is usable."""
    if configured != "auto":
        return configured
    return "kvm" if kvm_usable else "qemu"


def spec_differences(domain: ManagedDomain, spec: LaunchSpec) -> list[str]:
    """Fields in which an existing domain differs from a launch request."""
    pairs = {"role": (domain.role, spec.role), "vcpus": (domain.vcpus, spec.vcpus),
             "memory_mib": (domain.memory_mib, spec.memory_mib), "image": (domain.image, spec.image),
             "kernel_cmdline": (domain.kernel_cmdline, spec.kernel_cmdline),
             "lease_id": (domain.lease_id, spec.lease_id), "cpuset": (domain.cpuset, spec.cpuset)}
    def plain(value: object) -> str:
        return repr(value.value if isinstance(value, Enum) else value)
    return [f"{field} is {plain(have)}, not {plain(want)}" for field, (have, want) in pairs.items()
            if have != want]


class DomainManager:
    def __init__(self, config: AgentConfig, hypervisor: Hypervisor, events: EventBus | None = None) -> None:
        self.config = config
        self.hv = hypervisor
        self.events = events or EventBus()
        self.priority = PriorityController(self.events, config.cgroup_root, config.cpu_weights,
                                           config.guard)
        # Running managed domains, for the guard's and the sampler's fast paths; rebuilt by reconcile.
        self._known: dict[str, DomainInfo] = {}
        self._net_notes: set[str] = set()  # what the kernel cannot do for network shaping, each published once
        self._pids: dict[str, list[int]] = {}  # domain -> its QEMU process, for CPU counters
        self._facts: HostFacts | None = None
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        # What each running domain's XML says (None when it is not ours), kept between passes;
        # libvirt's events mark entries stale.
        self._views: dict[str, tuple[GleanerMetadata, DomainShape] | None] = {}
        self._stale: set[str] = set()
        self._all_stale = True
        self._stale_lock = threading.Lock()
        self._passes = 0
        self._views_lock = threading.Lock()
        # A reconcile pass and a class change never interleave: a pass that read the old class
        # would otherwise put it back right after the change (and report that as drift).
        self._class_lock = threading.Lock()
        self._reap_hint = True   # libvirt reported something since the reaper last listed
        self._reap_passes = 0
        hypervisor.watch(self.note_change)
        # 0711: QEMU (libvirt-qemu) must traverse to its overlay; nothing here can be listed by others.
        for directory, mode in ((config.state_dir, 0o711), (config.overlay_dir, 0o711),
                                (config.console_dir, 0o700)):
            directory.mkdir(parents=True, exist_ok=True)
            directory.chmod(mode)
        # Overlays take every domain write, so their device's scheduler decides the disk mechanism.
        self.disk_scheduler = blockdev.scheduler_of(config.overlay_dir)
        self.disk_mechanism = disk_mechanism(self.disk_scheduler)
        log_event(log, "disk.policy", scheduler=self.disk_scheduler, volunteer_mechanism=self.disk_mechanism,
                  note="weights act only under bfq; volunteers are capped instead"
                  if self.disk_mechanism == "caps" else "volunteers get the low block-I/O weight")

    # -- host -----------------------------------------------------------------------------------

    def host_facts(self) -> HostFacts:
        if self._facts is None:  # CPUs, memory and versions do not change while we run
            facts = self.hv.host_facts()
            # libvirt sums NUMA node memory, which misses hot-plugged memory on some hosts;
            # the kernel's MemTotal is what the host really has.
            memory_mib = max(facts.memory_mib, psutil.virtual_memory().total // 2**20)
            self._facts = dataclasses.replace(facts, memory_mib=memory_mib)
        return self._facts

    def limits(self) -> HostLimits:
        facts = self.host_facts()
        return HostLimits(cpus=facts.cpus, memory_mib=facts.memory_mib)

    @property
    def domain_type(self) -> str:
        if self.config.domain_type != "auto":  # no need to ask libvirt
            return self.config.domain_type
        return choose_domain_type("auto", self.host_facts().kvm_usable)

    def describe_host(self) -> HostDescription:
        return HostDescription(facts=self.host_facts(), cgroup=self.priority.facts,
                               disk_scheduler=self.disk_scheduler, disk_mechanism=self.disk_mechanism,
                               domain_type=self.domain_type, libvirt_uri=self.hv.uri,
                               agent_version=__version__, managed_domains=len(self.list()))

    # -- listing ----------------------------------------------------------------------------------

    def _ours(self, record: DomainRecord) -> GleanerMetadata | None:
        """The domain's metadata if this agent manages it: launched by Gleaner, with our id."""
        meta = read_metadata(record.xml)
        return meta if meta is not None and meta.agent_id == self.config.agent_id else None

    def _managed_records(self) -> list[tuple[DomainRecord, GleanerMetadata]]:
        pairs = [(r, self._ours(r)) for r in self.hv.list_domains()]
        return [(r, m) for r, m in pairs if m is not None]

    def list(self) -> list[ManagedDomain]:
        domains = [managed_domain(r, m, self.priority.is_boosted(r.name)) for r, m in self._managed_records()]
        return sorted(domains, key=lambda d: (d.launched_at, d.name))

    def _lookup(self, name: str) -> tuple[DomainRecord, GleanerMetadata]:
        record = self.hv.get_domain(name)
        if record is None:
            raise DomainNotFound(f"no domain named {name!r}")
        meta = self._ours(record)
        if meta is None:
            raise NotManaged(self._not_ours(record))
        return record, meta

    def _not_ours(self, record: DomainRecord) -> str:
        meta = read_metadata(record.xml)
        if meta is None:
            return f"domain {record.name!r} was not launched by Gleaner; the agent leaves it alone"
        return (f"domain {record.name!r} belongs to Gleaner agent {meta.agent_id!r}, not to this agent "
                f"({self.config.agent_id!r}); the agent leaves it alone")

    @contextmanager
    def _name_lock(self, name: str, blocking: bool = True) -> Iterator[bool]:
        with self._locks_guard:
            lock = self._locks.setdefault(name, threading.Lock())
        acquired = lock.acquire(blocking)
        try:
            yield acquired
        finally:
            if acquired:
                lock.release()

    # -- launch -----------------------------------------------------------------------------------

    def launch(self, spec: LaunchSpec) -> tuple[ManagedDomain, bool]:
        """Define and start `spec`; (domain, created). Same spec again returns (existing, False)."""
        with self._name_lock(spec.name):
            existing = self.hv.get_domain(spec.name)
            if existing is not None:
                return self._existing(existing, spec), False
            image = resolve_image(self.config.image_dir, spec.image)
            if spec.kernel_cmdline and not image.boots_kernel:
                raise InvalidField("kernel_cmdline", f"image {spec.image!r} boots from its own disk; "
                                                        "a kernel command line needs a kernel image")
            started = time.monotonic()
            self._create(spec, image)
            record = self.hv.get_domain(spec.name)
            if record is None:
                raise LaunchFailed(f"{spec.name} vanished right after it started")
            meta = self._ours(record)
            assert meta is not None
            interfaces = read_shape(record.xml).interfaces
            with self._class_lock:  # a reconcile pass now would find the class not yet applied
                self._known[spec.name] = DomainInfo(spec.role, spec.role, spec.memory_mib, interfaces)
                self._enforce(spec.name, spec.role)
                self._apply_net(spec.name, spec.role, interfaces)
            log_event(log, "domain.launched", domain=spec.name, role=spec.role.value, vcpus=spec.vcpus,
                      memory_mib=spec.memory_mib, image=spec.image, lease_id=spec.lease_id,
                      domain_type=self.domain_type, took_ms=round((time.monotonic() - started) * 1000))
            return managed_domain(record, meta), True

    def _enforce(self, name: str, cls: Role) -> None:
        """Apply a running domain's class now. A failure is logged, not fatal: libvirt's
        <shares> already holds the fallback weight, and the reconciler tries again."""
        try:
            changes = self.priority.apply(name, cls)
        except (OSError, ValueError) as exc:
            log_event(log, "priority.apply_failed", logging.ERROR, domain=name, error=str(exc))
            return
        log_event(log, "priority.applied", domain=name, priority_class=cls.value, changes="; ".join(changes))

    def disk_setting(self, cls: Role) -> DiskSetting:
        return disk_setting(cls, self.disk_mechanism, self.config.disk_policy)

    def _apply_disk(self, name: str, cls: Role) -> None:
        want = self.disk_setting(cls)
        self.hv.set_disk_priority(name, DISK_TARGET, want.weight, want.total_bytes_sec, want.total_iops_sec)

    def _apply_net(self, name: str, cls: Role, interfaces: tuple[str, ...]) -> list[str]:
        """Shape (volunteer) or unshape (foreground) the domain's taps; returns what changed."""
        cfg = self.config
        cap = net_cap(cls, cfg.network_volunteer_to_guest_bytes_per_second,
                      cfg.network_volunteer_from_guest_bytes_per_second)
        changes: list[str] = []
        for dev in interfaces:
            try:
                changed, note = netshape.apply_cap(dev, cap)
            except (OSError, LookupError, NetlinkError) as exc:
                log_event(log, "priority.apply_failed", logging.WARNING, domain=name, interface=dev, error=str(exc))
                continue
            changes += changed
            if note and note not in self._net_notes:
                self._net_notes.add(note)
                self.events.publish(Event("network.limited", name, note, {"interface": dev}, level=logging.WARNING))
        return changes

    def set_class(self, name: str, cls: Role) -> ManagedDomain:
        """Promote or demote a domain: in its metadata (so it survives restarts) and its cgroup."""
        with self._name_lock(name):
            record, meta = self._lookup(name)
            updated = dataclasses.replace(meta, priority_class=cls)
            with self._class_lock:
                self.hv.set_metadata(name, metadata_xml(updated), PREFIX, NAMESPACE)
                self.note_change(name)  # the next pass re-reads it, whenever libvirt's event arrives
                if record.active:
                    if name in self._known:
                        self._known[name] = dataclasses.replace(self._known[name], priority_class=cls)
                    self._enforce(name, cls)
                    if meta.overlay:
                        self._apply_disk(name, cls)
                    self._apply_net(name, cls, read_shape(record.xml).interfaces)
            if cls is not meta.priority_class:
                self.events.publish(Event("class.changed", name, f"{meta.priority_class.value} -> {cls.value}",
                                          {"from": meta.priority_class.value, "to": cls.value}))
            fresh = self.hv.get_domain(name)
            assert fresh is not None
            return managed_domain(fresh, updated, self.priority.is_boosted(name))

    def note_change(self, name: str | None) -> None:
        """libvirt says `name`'s XML may have changed (None: any domain's may have)."""
        with self._stale_lock:
            self._reap_hint = True
            if name is None:
                self._all_stale = True
            else:
                self._stale.add(name)

    def _take_stale(self, names: set[str]) -> set[str]:
        with self._stale_lock:
            stale = set(names) if self._all_stale else self._stale & names
            self._all_stale = False
            self._stale.clear()
        return stale

    def running(self) -> list[tuple[str, GleanerMetadata, DomainShape]]:
        """Running managed domains (name, metadata, shape): cheap, as reconcile keeps them."""
        return self._running_views()

    def _running_views(self) -> list[tuple[str, GleanerMetadata, DomainShape]]:
        """Running managed domains as their XML says, re-reading only what events marked stale."""
        with self._views_lock:
            return self._refresh_views()

    def _refresh_views(self) -> list[tuple[str, GleanerMetadata, DomainShape]]:
        self._passes += 1
        if self._passes % FULL_REFRESH_PASSES == 0:
            self.note_change(None)
        names = self.hv.active_domain_names()  # also notices a lost connection, which marks all stale
        stale = self._take_stale(names)
        for name in set(self._views) - names:
            del self._views[name]
        for name in names:
            if name in stale or name not in self._views:
                record = self.hv.get_domain(name)
                meta = self._ours(record) if record is not None and record.active else None
                self._views[name] = (meta, read_shape(record.xml)) if meta is not None else None
        return [(name, *view) for name, view in self._views.items() if view is not None]

    def reconcile(self) -> dict[str, list[str]]:
        """Re-assert every running managed domain's class; returns the corrections made."""
        with self._class_lock:
            return self._reconcile()

    def _reconcile(self) -> dict[str, list[str]]:
        running = self._running_views()
        self._known = {name: DomainInfo(m.role, m.priority_class, shape.memory_mib, shape.interfaces)
                       for name, m, shape in running}
        corrected = self.priority.reconcile([(name, m.priority_class) for name, m, _ in running])
        for name, meta, shape in running:
            changes = self._apply_net(name, meta.priority_class, shape.interfaces)
            if meta.overlay:
                changes += self._reconcile_disk(name, meta.priority_class, shape.disk_caps, shape.disk_weight)
            if changes:
                corrected.setdefault(name, []).extend(changes)
                self.events.publish(Event("drift.corrected", name, "; ".join(changes),
                                          {"class": meta.priority_class.value}))
        return corrected

    def _reconcile_disk(self, name: str, cls: Role, have: tuple[int, int], weight: int | None) -> list[str]:
        """Caps and the block-I/O weight are read from the live XML (no QEMU round trip) and put
        back if they drifted. A weight the XML does not show (None) is not judged."""
        want = self.disk_setting(cls)
        drifted = []
        if have != (want.total_bytes_sec, want.total_iops_sec):
            drifted.append(f"disk caps {have[0]} B/s, {have[1]} IOPS -> {want.total_bytes_sec} B/s, "
                           f"{want.total_iops_sec} IOPS")
        if weight is not None and weight != want.weight:
            drifted.append(f"disk weight {weight} -> {want.weight}")
        if not drifted:
            return []
        try:
            self._apply_disk(name, cls)
        except HypervisorError as exc:
            log_event(log, "priority.apply_failed", logging.WARNING, domain=name, error=str(exc))
            return []
        self.note_change(name)  # read them back next pass, whenever libvirt's event arrives
        return drifted

    def domain_info(self) -> dict[str, DomainInfo]:
        return dict(self._known)

    def _process_cpu_ns(self, name: str, group: Path) -> int:
        """CPU of the domain's QEMU, its pids cached while it runs (looked up again if gone)."""
        for attempt in (1, 2):
            pids = self._pids.get(name) or self._pids.setdefault(name, cgroups.group_pids(group))
            try:
                return cgroups.process_cpu_ns(pids)
            except (FileNotFoundError, ProcessLookupError):
                self._pids.pop(name, None)
        return 0

    def counters(self, names: list[str]) -> dict[str, DomainCounters]:
        """Cumulative counters of running domains, read from the kernel (their cgroups), never
        through libvirt: its statistics take a domain job and ask QEMU's monitor, which a busy
        or starved QEMU answers late, and one slow domain would stall the whole sample."""
        version = self.priority.facts.version
        groups = self.priority.groups
        out = {}
        for name in names:
            cpu_group = groups.find(name)
            if cpu_group is None:
                continue  # stopped since the last reconcile
            acct_group = groups.find(name, "cpuacct") if version == 1 else cpu_group
            cpu_ns = (cgroups.cpu_usage_ns(acct_group, version) if acct_group is not None
                      else self._process_cpu_ns(name, cpu_group))
            block_group = groups.find(name, "blkio" if version == 1 else "cpu")
            block = cgroups.block_counters(block_group, version) if block_group else cgroups.BlockCounters()
            interfaces = self._known[name].interfaces if name in self._known else ()
            traffic = [netshape.counters(dev) for dev in interfaces]
            out[name] = DomainCounters(cpu_ns=cpu_ns,
                                       read_bytes=block.read_bytes, write_bytes=block.write_bytes,
                                       read_ops=block.read_ops, write_ops=block.write_ops,
                                       rx_bytes=sum(t[0] for t in traffic), tx_bytes=sum(t[1] for t in traffic))
        return out

    def guard_tick(self) -> None:
        volunteers = {n: i.priority_class for n, i in self.domain_info().items()
                      if i.priority_class is Role.VOLUNTEER}
        self.priority.guard_tick(volunteers)

    def _existing(self, record: DomainRecord, spec: LaunchSpec) -> ManagedDomain:
        meta = self._ours(record)
        if meta is None:
            raise DomainConflict(f"a domain named {spec.name!r} already exists: {self._not_ours(record)}")
        domain = managed_domain(record, meta)
        differences = spec_differences(domain, spec)
        if differences:
            raise DomainConflict(f"domain {spec.name!r} exists with another spec: {'; '.join(differences)}")
        return domain

    def _create(self, spec: LaunchSpec, image) -> None:
        """Overlay, define, start; on any failure undo what was done, then raise LaunchFailed."""
        overlay: Path | None = None
        defined = False
        try:
            if image.disk is not None:
                overlay = create_overlay(self.config.overlay_dir, spec.name, image.disk, image.disk_format)
            xml = build_domain_xml(spec, image, self.domain_type, overlay,
                                   self.config.console_dir / f"{spec.name}.log", datetime.now(timezone.utc),
                                   cpu_shares=launch_shares(self.priority.facts, self.priority.weights),
                                   disk=self.disk_setting(spec.role), network=self.config.network_attach,
                                   agent_id=self.config.agent_id)
            self.hv.define(xml)
            defined = True
            self.hv.start(spec.name)
        except (HypervisorError, OverlayError) as exc:
            self._rollback(spec.name, defined, overlay)
            log_event(log, "domain.launch_failed", logging.ERROR, domain=spec.name, error=str(exc))
            raise LaunchFailed(f"launch of {spec.name!r} failed and was rolled back: {exc}") from None

    def _rollback(self, name: str, defined: bool, overlay: Path | None) -> None:
        try:
            if defined:
                self.hv.destroy(name)
                self.hv.undefine(name)
        except NoSuchDomain:
            pass
        except HypervisorError as exc:
            log_event(log, "domain.rollback_failed", logging.ERROR, domain=name, error=str(exc),
                      hint="remove it by hand with 'virsh destroy' and 'virsh undefine'")
        if overlay is not None:
            delete_overlay(overlay)

    # -- terminate --------------------------------------------------------------------------------

    def terminate(self, name: str, force: bool = False, grace_seconds: int | None = None) -> TerminationResult:
        """Stop a managed domain (gracefully unless forced) and remove it with its overlay."""
        grace = validate_grace(self.config.grace_seconds if grace_seconds is None else grace_seconds)
        with self._name_lock(name):
            record, meta = self._lookup(name)
            started = time.monotonic()
            if not record.active:
                outcome, detail = TerminationOutcome.ALREADY_STOPPED, f"it was already {record.state}"
            elif force:
                self.hv.destroy(name)
                outcome, detail = TerminationOutcome.DESTROYED_FORCED, "destroyed at once, as asked"
            else:
                outcome, detail = self._stop_gracefully(name, grace, started)
            duration = time.monotonic() - started
            self._remove(name, meta)
        log_event(log, "domain.terminated", domain=name, role=meta.role.value, outcome=outcome.value,
                  duration_s=round(duration, 3), grace_s=grace, detail=detail)
        return TerminationResult(name, outcome, duration, detail)

    def _is_active(self, name: str) -> bool:
        try:
            return is_active_state(self.hv.state(name))
        except NoSuchDomain:
            return False

    def _stop_gracefully(self, name: str, grace: int, started: float) -> tuple[TerminationOutcome, str]:
        try:
            if self.hv.state(name) == "paused":  # a paused guest cannot see the power button
                self.hv.resume(name)
            self.hv.shutdown_acpi(name)
        except HypervisorError as exc:
            self.hv.destroy(name)
            return TerminationOutcome.DESTROYED_AFTER_GRACE, f"ACPI shutdown failed ({exc}); destroyed"
        deadline = started + grace
        next_progress = started + PROGRESS_SECONDS
        while time.monotonic() < deadline:
            if not self._is_active(name):
                return TerminationOutcome.CLEAN_SHUTDOWN, "the guest powered off after the ACPI power button"
            if time.monotonic() >= next_progress:
                log_event(log, "domain.awaiting_shutdown", domain=name,
                          waited_s=round(time.monotonic() - started), grace_s=grace)
                next_progress += PROGRESS_SECONDS
            time.sleep(POLL_SECONDS)
        if not self._is_active(name):
            return TerminationOutcome.CLEAN_SHUTDOWN, "the guest powered off after the ACPI power button"
        self.hv.destroy(name)
        return (TerminationOutcome.DESTROYED_AFTER_GRACE,
                f"the guest did not power off within the {grace}s grace period; destroyed")

    def _remove(self, name: str, meta: GleanerMetadata) -> None:
        self._known.pop(name, None)
        self._pids.pop(name, None)
        self.priority.forget(name)
        try:
            self.hv.undefine(name)
        except NoSuchDomain:
            pass
        delete_overlay(Path(meta.overlay) if meta.overlay else overlay_path(self.config.overlay_dir, name))

    # -- cleaning up --------------------------------------------------------------------------------

    def reap(self) -> list[str]:
        """Remove volunteers that stopped on their own, and overlays no domain owns.

        A volunteer's work is disposable, so once its guest is off there is nothing to keep.
        Stopped domains are listed only when libvirt reported an event since the last pass
        (or every FULL_REFRESH_PASSES passes, in case one was missed). Returns what was
        removed, for logs and tests.
        """
        self._reap_passes += 1
        with self._stale_lock:
            hinted, self._reap_hint = self._reap_hint, False
        removed = []
        if hinted or self._reap_passes % FULL_REFRESH_PASSES == 0:
            removed += self._reap_stopped_volunteers()
        return removed + self._remove_orphan_overlays()

    def _reap_stopped_volunteers(self) -> list[str]:
        removed = []
        for record in self.hv.list_domains(inactive_only=True):  # cheap: few domains are ever off
            meta = self._ours(record)
            if meta is None or meta.role is not Role.VOLUNTEER or record.active:
                continue
            with self._name_lock(record.name, blocking=False) as free:
                current = self.hv.get_domain(record.name) if free else None
                if current is not None and not current.active:
                    self._remove(record.name, meta)
                    removed.append(record.name)
                    log_event(log, "volunteer.reaped", domain=record.name, state=current.state)
        return removed

    def _remove_orphan_overlays(self) -> list[str]:
        removed = []
        running = set(self._views)  # seen running by the last reconcile: surely not orphans
        for name, path in list_overlays(self.config.overlay_dir).items():
            if name in running:
                continue
            with self._name_lock(name, blocking=False) as free:
                if free and self.hv.get_domain(name) is None and delete_overlay(path):
                    removed.append(f"overlay:{name}")
                    log_event(log, "overlay.orphan_removed", domain=name, path=str(path))
        return removed
