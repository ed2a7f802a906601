"""Hibernation: a backfill domain's state saved to a file instead of its work thrown away, and
restored when the controller finds room for it again (docs/agent.md, "Hibernation").

HibernateDomain saves a running backfill domain (libvirt's virDomainSaveFlags, no ACPI power
button: a guest saved while powering off would resume into a shutdown) into the hibernation
directory; the domain stays defined, inactive, with its overlay. ResumeDomain restores it PAUSED,
puts its volunteer settings on (cpu.idle, block I/O, tc), only then lets it run, and deletes the
state file. A hibernated domain is an inactive managed domain with a complete state file
(statefiles.Kind.COMPLETE): nothing else marks it, so no record can disagree with the disk.

Both are libvirtd jobs, which go on when the agent dies. What a restarted agent (and every reaper
pass) finds, and does (reconcile):

* a state file whose domain is gone, or that is no save image: deleted;
* an active domain with a job under way (a save or a restore): left for the next pass;
* an active domain with a half-written state file and no job (a save that failed or never
  finished): the file is deleted, the domain runs on;
* an active domain with a complete state file (a restore finished, the agent died before it
  deleted the file): the nap is recorded, the volunteer settings put on, the domain resumed if it
  is paused, the file deleted (_finish, as ResumeDomain would have);
* an inactive domain with a half-written state file: the file is deleted; the domain is then a
  stopped backfill domain, which the reaper removes as today;
* an inactive domain with a complete state file: hibernated; left alone (the reaper too).

The time a domain sleeps is kept in its Gleaner metadata (naps): its run time and its work clock
(the work channel's age) count only the time it ran.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
import xml.etree.ElementTree as ET
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from gleaner_common.logs import log_event
from gleaner_common.vocabulary import PriorityClass, role_of

from .config import AgentConfig
from .crashpoints import crash_point, is_armed
from .domains import Domains
from .enforcement import Enforcement
from .host import procprio, statefiles
from .host.domainxml import NAMESPACE, PREFIX, GleanerMetadata, metadata_xml, read_metadata, read_shape, with_nap
from .host.errors import HostExhausted, HostRefused
from .host.hypervisor import DomainRecord, Hypervisor, HypervisorError
from .host.statefiles import Kind, StateFile
from .inventory import Inventory, ManagedDomain
from .metrics import DomainInfo

log = logging.getLogger(__name__)
MIB = 2**20
HEADER_SLACK = MIB      # libvirt's header and the domain XML, beyond the guest's memory
HELPER_POLL_SECONDS = 0.01
# For tests/bench/hibernate.py --untuned only: save and restore as libvirt does by default (page
# cache, libvirt_iohelper at libvirtd's priority), to measure what the tuning buys.
UNTUNED = os.environ.get("GLEANER_AGENT_HIBERNATE_UNTUNED") == "1"


class HibernationRefused(HostRefused):
    """The domain is not one to hibernate or resume (on-demand, stopped, no state file)."""


class HibernationBudget(HostExhausted):
    """The save would cross the hibernation budget or the overlays' disk reserve: nothing saved."""


@dataclass(frozen=True)
class Saved:
    name: str
    duration_seconds: float
    state_bytes: int
    detail: str
    saved: bool            # False: it was already hibernated
    hibernated_at: float   # seconds since the epoch


@dataclass(frozen=True)
class Resumed:
    domain: ManagedDomain
    duration_seconds: float
    resumed: bool          # False: it was already running


@dataclass(frozen=True)
class Figures:
    budget_bytes: int
    used_bytes: int
    room_bytes: int        # what one more save may use: budget left, and disk beyond the reserve


def restore_xml(image_xml: str) -> str:
    """The save image's domain XML with its console log and work channel appended to, not
    truncated: the restored QEMU reopens them, and the work channel's last line and mtime are
    the guest's work clock."""
    root = ET.fromstring(image_xml)
    for element in root.findall("devices/serial/log") + root.findall("devices/channel/source"):
        if element.get("append") is not None:
            element.set("append", "on")
    return ET.tostring(root, encoding="unicode")


class Hibernation:
    def __init__(self, config: AgentConfig, hypervisor: Hypervisor, inventory: Inventory,
                 enforcement: Enforcement, domains: Domains) -> None:
        self.config = config
        self.hv = hypervisor
        self.inventory = inventory
        self.enforcement = enforcement
        self.domains = domains
        self.directory = config.hibernation_dir
        self._pending: dict[str, int] = {}   # saves under way: their files' upper bounds
        self._pending_lock = threading.Lock()
        self._jobs: set[str] = set()         # names libvirtd is saving or restoring now (under _pending_lock)
        self.recheck = False                 # a job was under way: look again next pass

    # -- the disk ------------------------------------------------------------------------------------

    def figures(self) -> Figures:
        budget = self.config.hibernation_budget_mib * MIB
        used = statefiles.used_bytes(self.directory)
        with self._pending_lock:
            pending = sum(self._pending.values())
        free = statefiles.free_bytes(self.directory) - self.config.hibernation_disk_reserve_mib * MIB
        return Figures(budget, used, max(0, min(budget - used - pending, free - pending)))

    def busy(self) -> frozenset[str]:
        """The domains libvirtd is saving or restoring now. libvirtd holds such a domain's lock for
        the whole job, and every call that looks at it (a listing of the running domains too)
        waits that long: the reporter reads what it knew before instead."""
        with self._pending_lock:
            return frozenset(self._jobs)

    @contextmanager
    def _job_under_way(self, name: str) -> Iterator[None]:
        with self._pending_lock:
            self._jobs.add(name)
        try:
            yield
        finally:
            with self._pending_lock:
                self._jobs.discard(name)

    @contextmanager
    def _reserved(self, name: str, bound: int) -> Iterator[None]:
        """Hold `bound` bytes of room for a save under way, or refuse (HibernationBudget)."""
        with self._pending_lock:
            budget_mib, reserve_mib = self.config.hibernation_budget_mib, self.config.hibernation_disk_reserve_mib
            if budget_mib == 0:
                raise HibernationBudget(f"hibernation is off on this node (hibernation.budget_mib = 0); "
                                        f"{name} was not saved")
            files = statefiles.list_state_files(self.directory)
            used, pending = sum(f.size for f in files.values()), sum(self._pending.values())
            if used + pending + bound > budget_mib * MIB:
                raise HibernationBudget(
                    f"hibernating {name} needs up to {bound // MIB} MiB (its memory) but the hibernation budget "
                    f"(hibernation.budget_mib) is {budget_mib} MiB, with {used // MIB} MiB used by {len(files)} "
                    f"state file(s) and {pending // MIB} MiB held by saves under way; {name} still runs")
            free = statefiles.free_bytes(self.directory)
            if free - pending - bound < reserve_mib * MIB:
                raise HibernationBudget(
                    f"hibernating {name} needs up to {bound // MIB} MiB (its memory) but {self.directory}'s disk has "
                    f"{free // MIB} MiB free and hibernation.disk_reserve_mib keeps {reserve_mib} MiB for the "
                    f"overlays ({pending // MIB} MiB held by saves under way); {name} still runs")
            self._pending[name] = bound
        try:
            yield
        finally:
            with self._pending_lock:
                self._pending.pop(name, None)

    # -- hibernate ------------------------------------------------------------------------------------

    def hibernate(self, name: str) -> Saved:
        """Save a running backfill domain's state; idempotent for one already hibernated."""
        with self.domains.locks.hold(name):
            started = time.monotonic()
            record, meta = self.inventory.lookup(name)
            self._backfill_only(name, meta, "hibernated")
            existing = statefiles.read_state_file(self.directory, name)
            if not record.active:
                if existing is not None and existing.kind is Kind.COMPLETE:
                    return Saved(name, 0.0, existing.size, f"{name} was already hibernated", False, existing.mtime)
                raise HibernationRefused(f"{name} is {record.state} and has no saved state: there is nothing to "
                                         "hibernate (terminate it instead)")
            if existing is not None and existing.kind is Kind.COMPLETE:   # restored; its resume did not finish
                raise HibernationRefused(f"{name} was restored but its resume has not finished; the reaper finishes "
                                         "it within a pass: ask again then")
            statefiles.check_directory(self.directory)
            bound = read_shape(record.xml).memory_mib * MIB + HEADER_SLACK
            with self._reserved(name, bound):
                statefiles.clear_path(self.directory, name)
                self._save(name, meta, record, started)
            crash_point("hibernate.after_save")
            return self._saved(name, meta, record, started)

    def _saved(self, name: str, meta: GleanerMetadata, record: DomainRecord, started: float) -> Saved:
        """After libvirt's save: bank its CPU time, let the running-domain parts forget it, log."""
        # its CPU time so far: the restored QEMU's count starts again at 0 (lost if the agent dies
        # right before this: only the reported CPU time, not the guest's work)
        banked = dataclasses.replace(meta, banked_cpu_ns=meta.banked_cpu_ns + record.cpu_time_ns)
        self.hv.set_metadata(name, metadata_xml(banked), PREFIX, NAMESPACE)
        self.inventory.forget(name)     # it no longer runs: the guard and sampler let it go
        self.enforcement.forget(name)   # a restored domain has a new QEMU and a new cgroup
        self.inventory.note_change(name)
        saved = statefiles.read_state_file(self.directory, name)
        if saved is None or saved.kind is not Kind.COMPLETE:   # libvirt said done: a bug if not so
            raise HibernationRefused(f"libvirt saved {name} but its state file is "
                                     f"{'missing' if saved is None else saved.kind.value}")
        duration = time.monotonic() - started
        log_event(log, "hibernate.saved", domain=name, lease_id=meta.lease_id, path=str(saved.path),
                  state_bytes=saved.size, memory_mib=read_shape(record.xml).memory_mib, duration_s=round(duration, 3),
                  slept_before_s=round(meta.slept_s, 1),
                  note="the domain is stopped with its state on disk; ResumeDomain restores it")
        return Saved(name, duration, saved.size, f"saved {saved.size // MIB} MiB in {duration:.2f}s to {saved.path}",
                     True, saved.mtime)

    def _backfill_only(self, name: str, meta: GleanerMetadata, what: str) -> None:
        if meta.role is not PriorityClass.VOLUNTEER:
            raise HibernationRefused(f"{name} is an on-demand VM; only backfill VMs are {what}")

    def _save(self, name: str, meta: GleanerMetadata, record: DomainRecord, started: float) -> None:
        path = statefiles.state_path(self.directory, name)
        log_event(log, "hibernate.started", domain=name, lease_id=meta.lease_id, role=role_of(meta.role).value,
                  memory_mib=read_shape(record.xml).memory_mib, path=str(path), state=record.state)
        try:
            with self._job_under_way(name):
                self._libvirt_job(lambda: self.hv.save(name, str(path), bypass_cache=not UNTUNED), path,
                                  "hibernate.after_save_started", path.exists)
        except HypervisorError as exc:
            # libvirt removes its partial file and lets the domain run on; make sure of the file
            still = statefiles.read_state_file(self.directory, name)
            if still is not None and still.kind is not Kind.COMPLETE:
                statefiles.delete(self.directory, name)
            log_event(log, "hibernate.failed", logging.ERROR, domain=name, lease_id=meta.lease_id, error=str(exc),
                      after_s=round(time.monotonic() - started, 3),
                      note="nothing was saved; the domain runs on (or is gone, if libvirt stopped it)")
            raise

    def _libvirt_job(self, job: Callable[[], None], path: Path, point: str, begun: Callable[[], bool]) -> None:
        """Run a save or restore (a blocking libvirt call) in a thread while this one puts
        libvirt's I/O helper for `path` at volunteer priority (host/procprio.py) and, if a test
        armed the crash point `point`, passes it once `begun()` says libvirtd is at work."""
        errors: list[BaseException] = []

        def run() -> None:
            try:
                job()
            except BaseException as exc:   # noqa: BLE001 - handed to the caller's thread
                errors.append(exc)
        worker = threading.Thread(target=run, name=f"libvirt-job-{path.name}", daemon=True)
        worker.start()
        helper_done, point_passed = False, not is_armed(point)
        while worker.is_alive():
            if not helper_done and not UNTUNED:
                for pid in procprio.helpers_for(path):
                    helper_done = True   # one helper per job; stop scanning /proc once found
                    log_event(log, "hibernate.helper_idled", logging.DEBUG, pid=pid, path=str(path),
                              done=",".join(procprio.make_idle(pid)))
            if not point_passed and begun():
                point_passed = True
                crash_point(point)
            worker.join(HELPER_POLL_SECONDS if not helper_done else 0.05)
        if errors:
            raise errors[0]

    # -- resume ---------------------------------------------------------------------------------------

    def resume(self, name: str) -> Resumed:
        """Restore a hibernated domain paused, put its class on, then let it run; idempotent."""
        with self.domains.locks.hold(name):
            started = time.monotonic()
            record, meta = self.inventory.lookup(name)
            self._backfill_only(name, meta, "resumed")
            state = statefiles.read_state_file(self.directory, name)
            if record.active:
                if state is not None and state.kind is Kind.COMPLETE:   # restored by a resume that died
                    self._finish(name, state, "a resume that did not finish")
                return Resumed(self.inventory.describe(name), 0.0, False)
            if state is None or state.kind is not Kind.COMPLETE:
                raise HibernationRefused(f"{name} is {record.state} and has no complete state file: it is not "
                                         "hibernated and cannot be resumed (terminate it)")
            log_event(log, "resume.started", domain=name, lease_id=meta.lease_id, state_bytes=state.size,
                      slept_s=round(time.time() - state.mtime, 1))
            try:
                xml = restore_xml(self.hv.save_image_xml(str(state.path)))
                with self.enforcement.launching(name), self._job_under_way(name):   # (reconcile: not half-restored)
                    self._libvirt_job(lambda: self.hv.restore_paused(str(state.path), xml, not UNTUNED), state.path,
                                      "resume.restore_started", lambda: self.hv.state(name) != "shutoff")
                    crash_point("resume.after_restore")
                    self._finish(name, state, "")
            except HypervisorError as exc:
                log_event(log, "resume.failed", logging.ERROR, domain=name, lease_id=meta.lease_id, error=str(exc),
                          after_s=round(time.monotonic() - started, 3),
                          note="the domain stays hibernated with its state file; ResumeDomain may be asked again")
                raise
            duration = time.monotonic() - started
            domain = self.inventory.describe(name)
            log_event(log, "resume.resumed", domain=name, lease_id=meta.lease_id, duration_s=round(duration, 3),
                      slept_s=round(time.time() - state.mtime, 1), state_bytes_freed=state.size,
                      priority_class=domain.priority_class.value)
            return Resumed(domain, duration, True)

    def _finish(self, name: str, state: StateFile, recovering: str) -> None:
        """A restored (active) domain: record its nap, put its class on while it is still paused,
        let it run, then delete the state file (last: until then reconcile can finish this)."""
        persistent = read_metadata(self.hv.inactive_xml(name))
        if persistent is None:
            raise HibernationRefused(f"{name} lost its Gleaner metadata while restored; left paused")
        meta = with_nap(persistent, state.mtime, time.time())
        self.hv.set_metadata(name, metadata_xml(meta), PREFIX, NAMESPACE)
        record = self.hv.get_domain(name)
        if record is None:
            raise HibernationRefused(f"{name} vanished right after its restore")
        shape = read_shape(record.xml)
        self.enforcement.restored(name, DomainInfo(meta.role, meta.priority_class, shape.memory_mib,
                                                   shape.interfaces), has_disk=bool(meta.overlay))
        crash_point("resume.before_run")
        if self.hv.state(name) == "paused":
            self.hv.resume(name)
        statefiles.delete(self.directory, name)
        self.inventory.note_change(name)
        if recovering:
            log_event(log, "resume.finished", domain=name, lease_id=meta.lease_id, after=recovering,
                      note="the restore had finished; its volunteer settings are on and it runs")

    # -- what is hibernated, and recovery ---------------------------------------------------------------

    def hibernated(self) -> list[tuple[DomainRecord, GleanerMetadata, StateFile]]:
        """The hibernated managed domains: inactive, with a complete state file (one being restored
        is left out: libvirtd holds it until it runs, and the controller waits for it as resuming)."""
        found = []
        busy = self.busy()
        for name, state in statefiles.list_state_files(self.directory).items():
            if state.kind is not Kind.COMPLETE or name in busy:
                continue
            record = self.hv.get_domain(name)
            meta = self.inventory.ours(record) if record is not None else None
            if record is not None and meta is not None and not record.active:
                found.append((record, meta, state))
        return found

    def reconcile(self) -> list[str]:
        """Settle every state file as the module's doc says; returns what was done, for logs and tests."""
        self.recheck = False
        done = []
        for name in statefiles.list_state_files(self.directory):
            with self.domains.locks.hold(name, blocking=False) as free:
                if not free:
                    continue   # a hibernate, resume or terminate is at it
                try:
                    outcome = self._settle(name)
                except HypervisorError as exc:
                    log_event(log, "hibernate.reconcile_failed", logging.WARNING, domain=name, error=str(exc))
                    self.recheck = True
                    continue
                if outcome:
                    done.append(f"{outcome}:{name}")
        return done

    def _settle(self, name: str) -> str:
        state = statefiles.read_state_file(self.directory, name)
        if state is None:
            return ""
        record = self.hv.get_domain(name)
        meta = self.inventory.ours(record) if record is not None else None
        if record is None or meta is None:
            return self._drop(name, state, "its domain is gone" if record is None else "its domain is not ours")
        if state.kind is Kind.FOREIGN:
            return self._drop(name, state, "it is no libvirt save image")
        if record.active:
            if self.hv.job_running(name):
                self.recheck = True
                return ""
            if state.kind is Kind.PARTIAL:
                return self._drop(name, state, "its save never finished; the domain runs on")
            with self.enforcement.launching(name):
                self._finish(name, state, "an agent restart (the restore had finished)")
            return "resumed"
        if state.kind is Kind.PARTIAL:
            return self._drop(name, state, "its save never finished; the domain is a stopped backfill domain, "
                                           "reaped as such")
        return ""   # hibernated: its state file is its work

    def _drop(self, name: str, state: StateFile, why: str) -> str:
        freed = statefiles.delete(self.directory, name)
        log_event(log, "hibernate.state_file_removed", logging.WARNING, domain=name, path=str(state.path),
                  kind=state.kind.value, bytes=freed, why=why)
        return "removed"
