"""What is on this node: the host's facts and the managed domains, as libvirt says.

The inventory keeps no state of its own about a domain beyond caches: everything it knows
is in the domain's metadata. Running domains' XML views are kept between passes and
re-read only when libvirt's events mark them stale (note_change), so reconcile passes and
reports stay cheap; every FULL_REFRESH_PASSES passes all of them are re-read anyway, in
case an event was missed.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable

from gleaner_common.logs import log_event
from gleaner_common.vocabulary import PriorityClass

from .config import AgentConfig
from .host.domainxml import DomainShape, GleanerMetadata, read_metadata, read_shape, slept_since
from .host import system
from .host.hypervisor import DomainRecord, HostFacts, Hypervisor
from .host.statefiles import Kind, StateFile, read_state_file
from .host.workchannel import SILENT, WorkState, channel_path, read_work_state
from .metrics import DomainInfo
from .validation import HostLimits

log = logging.getLogger(__name__)

# libvirt's events say when a domain's XML may have changed, so reconcile re-reads only
# those; every this many passes it re-reads all of them anyway, in case one was missed.
FULL_REFRESH_PASSES = 30


class DomainNotFound(LookupError):
    pass


class NotManaged(PermissionError):
    """The domain exists but Gleaner did not launch it: the agent will not touch it."""


@dataclass(frozen=True)
class ManagedDomain:
    name: str
    uuid: str
    role: PriorityClass
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
    priority_class: PriorityClass = PriorityClass.FOREGROUND
    boosted: bool = False
    work: WorkState = SILENT   # what a backfill guest last said on its work channel
    hibernated_bytes: int = 0            # its state file's size while hibernated
    hibernated_at: float | None = None   # when its save finished (epoch seconds), while hibernated
    slept_s: float = 0.0                 # seconds spent hibernated since launch, the current sleep too
    retire_after_s: int = 0              # what its guest was told of its recycle (gleaner.retire_after)


def managed_domain(record: DomainRecord, meta: GleanerMetadata, boosted: bool = False,
                   work: WorkState = SILENT, saved: StateFile | None = None) -> ManagedDomain:
    """`saved`: the domain's state file, if any; a stopped domain with a complete one is hibernated."""
    shape = read_shape(record.xml)
    asleep = asleep_since(record, saved)
    return ManagedDomain(name=record.name, uuid=record.uuid, role=meta.role,
                         state="hibernated" if asleep is not None else record.state,
                         vcpus=shape.vcpus, memory_mib=shape.memory_mib, launched_at=meta.launched_at,
                         lease_id=meta.lease_id, cpu_time_ns=record.cpu_time_ns + meta.banked_cpu_ns,
                         image=meta.image, kernel_cmdline=meta.kernel_cmdline, console_log=shape.console_log,
                         cpuset=shape.cpuset, priority_class=meta.priority_class, boosted=boosted, work=work,
                         hibernated_bytes=saved.size if asleep is not None and saved else 0, hibernated_at=asleep,
                         slept_s=meta.slept_s + (max(0.0, time.time() - asleep) if asleep is not None else 0.0),
                         retire_after_s=meta.retire_after_s)


def asleep_since(record: DomainRecord, saved: StateFile | None) -> float | None:
    """When a hibernated domain's save finished (its state file's mtime); None if it is not hibernated."""
    if record.active or saved is None or saved.kind is not Kind.COMPLETE:
        return None
    return saved.mtime


def guest_work(console_dir: Path, name: str, meta: GleanerMetadata, asleep_from: float | None = None) -> WorkState:
    """What a backfill domain's guest (or a goal's dedicated VM's) last said of its work (SILENT
    for a domain without the work channel: other on-demand domains), its age counting only the
    time the domain ran: the naps since the statement (and the current one, from `asleep_from`,
    while it is hibernated) are taken off."""
    if not meta.has_work_channel:
        return SILENT
    now = time.time()
    work = read_work_state(channel_path(console_dir, name), now)
    if not (work.state or work.progress) or not (meta.naps or asleep_from is not None):
        return work
    # both ages are the file's last write (workchannel): the same naps come off each
    age = work.for_s if work.state else work.progress_for_s
    awake = max(0.0, age - slept_since(meta.naps, now - age, now, asleep_from))
    return dataclasses.replace(work, for_s=awake if work.state else 0.0,
                               progress_for_s=awake if work.progress else 0.0)


def choose_domain_type(configured: str, kvm_usable: bool) -> str:
    """The libvirt domain type to launch with: `auto` means KVM only when it is usable."""
    if configured != "auto":
        return configured
    return "kvm" if kvm_usable else "qemu"


class Inventory:
    """The host's facts and the managed domains; the running ones kept fresh by libvirt's events."""

    def __init__(self, config: AgentConfig, hypervisor: Hypervisor,
                 boosted: Callable[[str], bool] = lambda _name: False) -> None:
        self.config = config
        self.hv = hypervisor
        self._boosted = boosted
        self._facts: HostFacts | None = None
        # Running managed domains, for the guard's and the sampler's fast paths; rebuilt by each
        # reconcile pass, updated at launch, class change and removal.
        self._info: dict[str, DomainInfo] = {}
        # What each running domain's XML says (None when it is not ours), kept between passes;
        # libvirt's events mark entries stale.
        self._views: dict[str, tuple[GleanerMetadata, DomainShape] | None] = {}
        self._stale: set[str] = set()
        self._all_stale = True
        self._stale_lock = threading.Lock()
        self._passes = 0
        self._views_lock = threading.Lock()
        # the last pass's running managed domains, read without a lock (one reference swapped per pass)
        self._snapshot: list[tuple[str, GleanerMetadata, DomainShape]] = []
        self._reap_hint = True   # libvirt reported something since the reaper last asked
        self._noisy: set[str] = set()   # domains whose noisy work channel was logged
        hypervisor.watch(self.note_change)

    # -- host -----------------------------------------------------------------------------------

    def host_facts(self) -> HostFacts:
        if self._facts is None:  # CPUs, memory and versions do not change while we run
            facts = self.hv.host_facts()
            # libvirt sums NUMA node memory, which misses hot-plugged memory on some hosts;
            # the kernel's MemTotal is what the host really has.
            memory_mib = max(facts.memory_mib, system.memory_total_bytes() // 2**20)
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

    # -- every managed domain, from libvirt -------------------------------------------------------

    def ours(self, record: DomainRecord) -> GleanerMetadata | None:
        """The domain's metadata if this agent manages it: launched by Gleaner, with our id."""
        meta = read_metadata(record.xml)
        return meta if meta is not None and meta.agent_id == self.config.agent_id else None

    def not_ours(self, record: DomainRecord) -> str:
        meta = read_metadata(record.xml)
        if meta is None:
            return f"domain {record.name!r} was not launched by Gleaner; the agent leaves it alone"
        return (f"domain {record.name!r} belongs to Gleaner agent {meta.agent_id!r}, not to this agent "
                f"({self.config.agent_id!r}); the agent leaves it alone")

    def managed_records(self, inactive_only: bool = False) -> list[tuple[DomainRecord, GleanerMetadata]]:
        pairs = [(r, self.ours(r)) for r in self.hv.list_domains(inactive_only=inactive_only)]
        return [(r, m) for r, m in pairs if m is not None]

    def list(self) -> list[ManagedDomain]:
        domains = [self._described(r, m) for r, m in self.managed_records()]
        return sorted(domains, key=lambda d: (d.launched_at, d.name))

    def _described(self, record: DomainRecord, meta: GleanerMetadata) -> ManagedDomain:
        saved = None if record.active else read_state_file(self.config.hibernation_dir, record.name)
        asleep = asleep_since(record, saved)
        return managed_domain(record, meta, self._boosted(record.name),
                              self.work_state(record.name, meta, asleep), saved)

    def lookup(self, name: str) -> tuple[DomainRecord, GleanerMetadata]:
        record = self.hv.get_domain(name)
        if record is None:
            raise DomainNotFound(f"no domain named {name!r}")
        meta = self.ours(record)
        if meta is None:
            raise NotManaged(self.not_ours(record))
        return record, meta

    def describe(self, name: str) -> ManagedDomain:
        """The domain as it is now, with `name`'s boost."""
        record, meta = self.lookup(name)
        return self._described(record, meta)

    def work_state(self, name: str, meta: GleanerMetadata, asleep_from: float | None = None) -> WorkState:
        work = guest_work(self.config.console_dir, name, meta, asleep_from)
        if work.noisy and name not in self._noisy:
            self._noisy.add(name)   # once per domain (the set is as bounded as the domains)
            log_event(log, "guest.work_channel_noisy", logging.WARNING, domain=name,
                      file=str(channel_path(self.config.console_dir, name)),
                      hint="the guest writes its work channel far more than a line per job; virtlogd caps "
                           "the file at 4 x 2 MiB, and only its last busy/idle and progress lines are read")
        return work

    # -- running managed domains, kept by libvirt's events -----------------------------------------

    def note_change(self, name: str | None) -> None:
        """libvirt says `name`'s XML may have changed (None: any domain's may have)."""
        with self._stale_lock:
            self._reap_hint = True
            if name is None:
                self._all_stale = True
            else:
                self._stale.add(name)

    def take_reap_hint(self) -> bool:
        """Whether libvirt reported anything since the last call (the reaper's cue to list)."""
        with self._stale_lock:
            hinted, self._reap_hint = self._reap_hint, False
        return hinted

    def _take_stale(self, names: set[str]) -> set[str]:
        with self._stale_lock:
            stale = set(names) if self._all_stale else self._stale & names
            self._all_stale = False
            self._stale.clear()
        return stale

    def running(self) -> list[tuple[str, GleanerMetadata, DomainShape]]:
        """Running managed domains (name, metadata, shape) as their XML says, re-reading only
        what events marked stale: cheap, as the views are kept between passes."""
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
                meta = self.ours(record) if record is not None and record.active else None
                self._views[name] = (meta, read_shape(record.xml)) if meta is not None else None
        self._snapshot = [(name, *view) for name, view in self._views.items() if view is not None]
        return list(self._snapshot)

    def running_snapshot(self) -> list[tuple[str, GleanerMetadata, DomainShape]]:
        """The running managed domains as the last finished pass saw them: no libvirt call and no
        lock, for a reader that must not wait while libvirtd holds a domain (a save or restore
        locks it, and every listing with it, for as long as it runs)."""
        return list(self._snapshot)

    def last_running(self) -> list[tuple[str, GleanerMetadata, DomainShape]]:
        """The running managed domains as the last pass saw them, without asking libvirt."""
        with self._views_lock:
            return [(name, *view) for name, view in self._views.items() if view is not None]

    def last_running_names(self) -> set[str]:
        """Every domain the last pass saw running (ours or not)."""
        with self._views_lock:
            return set(self._views)

    # -- what the guard and the sampler read -------------------------------------------------------

    def domain_info(self) -> dict[str, DomainInfo]:
        return dict(self._info)

    def set_info(self, info: dict[str, DomainInfo], keep: set[str] | frozenset[str] = frozenset()) -> None:
        """A pass's picture of the running domains; `keep` (launches under way, which the pass
        may have listed before they started) keep what their launch remembered."""
        current = self._info
        self._info = {**{n: current[n] for n in list(keep) if n in current}, **info}

    def remember(self, name: str, info: DomainInfo) -> None:
        self._info[name] = info

    def set_class(self, name: str, cls: PriorityClass) -> None:
        if name in self._info:
            self._info[name] = dataclasses.replace(self._info[name], priority_class=cls)

    def forget(self, name: str) -> None:
        """A domain this agent stopped (terminated, or saved): it no longer runs. It also leaves
        the last pass's snapshot, which the report reads while a save or restore holds libvirtd:
        else a VM destroyed then was reported running until the next pass, and the controller
        counted its room as taken (a request preempted two backfill VMs where one made room)."""
        self._info.pop(name, None)
        self._noisy.discard(name)
        self._snapshot = [entry for entry in self._snapshot if entry[0] != name]   # one reference swapped
