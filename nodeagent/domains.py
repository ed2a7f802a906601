"""Domains: launch (with rollback), terminate (ACPI, grace, destroy) and class changes.

This module reaches libvirt only through Hypervisor and disks only through images, and
keeps no state of its own beyond per-name locks: everything it knows about a domain is in
the domain's metadata.

A launch survives the agent's death part-way (see nodeagent/crashpoints.py): the domain is
defined with started=no in its metadata and marked started=yes right after it starts. So a
stopped domain still marked started=no was never started: a repeated launch of the same
name and spec starts it (and reports created), and the reaper removes it with its overlay
once it is older than lifecycle.unfinished_launch_seconds, if no launch came first. An overlay made before the agent died, with no domain defined, is
an orphan, which the reaper removes. Terminate is idempotent: a repeat after a crash
mid-terminate finds the domain stopped (or still running) and finishes the job.
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

from gleaner_common.ids import InvalidField
from gleaner_common.logs import log_event
from gleaner_common.vocabulary import PriorityClass, role_of

from .config import AgentConfig
from .crashpoints import crash_point
from .enforcement import Enforcement
from .events import Event, EventBus
from .host.domainxml import NAMESPACE, PREFIX, GleanerMetadata, build_domain_xml, metadata_xml, read_metadata, read_shape
from .host import statefiles
from .host.errors import HostRefused
from .host.hypervisor import DomainRecord, Hypervisor, HypervisorError, NoSuchDomain, is_active_state
from .host.images import BootImage, OverlayError, create_overlay, delete_overlay, overlay_path, resolve_image
from .host.logfiles import CONSOLE, WORK, console_path, remove_domain_files
from .host.settings import LaunchSpec
from .host.workchannel import channel_path
from .inventory import DomainNotFound, Inventory, ManagedDomain, managed_domain
from .metrics import DomainInfo
from .validation import validate_grace

log = logging.getLogger(__name__)
POLL_SECONDS = 0.05
PROGRESS_SECONDS = 5.0


class DomainConflict(RuntimeError):
    """A domain of that name exists with another spec."""


class LaunchFailed(HostRefused):
    """The domain changed behind the agent's back during its launch (undefined, redefined by
    someone else); everything the launch made was removed."""


class LaunchBug(RuntimeError):
    """The agent built something it should not have (a bug: answered INTERNAL); nothing was defined."""


def rolled_back(name: str, exc: Exception) -> Exception:
    """The error that failed a launch, of the same kind (so answered with the same status code),
    saying the launch was undone."""
    message = f"launch of {name!r} failed and was rolled back: {exc}"
    if isinstance(exc, NoSuchDomain):   # undefined behind the agent's back, mid-launch
        return LaunchFailed(message)
    return type(exc)(message)


class TerminationOutcome(str, Enum):
    CLEAN_SHUTDOWN = "clean_shutdown"
    DESTROYED_AFTER_GRACE = "destroyed_after_grace"
    DESTROYED_FORCED = "destroyed_forced"
    ALREADY_STOPPED = "already_stopped"


@dataclass(frozen=True)
class TerminationResult:
    name: str
    outcome: TerminationOutcome
    duration_seconds: float
    detail: str


def spec_differences(domain: ManagedDomain, spec: LaunchSpec) -> list[str]:
    """Fields in which an existing domain differs from a launch request."""
    pairs = {"role": (domain.role, spec.role), "vcpus": (domain.vcpus, spec.vcpus),
             "memory_mib": (domain.memory_mib, spec.memory_mib), "image": (domain.image, spec.image),
             "kernel_cmdline": (domain.kernel_cmdline, spec.kernel_cmdline),
             "lease_id": (domain.lease_id, spec.lease_id), "cpuset": (domain.cpuset, spec.cpuset)}
    # retire_after_seconds is left out: a launch asked again after the pool's duration_seconds
    # changed is still the same VM, and its guest keeps what it was told at boot; work_channel
    # too: the lease asks for it the same way each time
    def plain(value: object) -> str:
        return repr(value.value if isinstance(value, Enum) else value)
    return [f"{field} is {plain(have)}, not {plain(want)}" for field, (have, want) in pairs.items()
            if have != want]


class NameLocks:
    """One lock per domain name: launch, terminate, class changes and the reaper take turns.

    A name's lock exists only while someone holds it or waits for it (a count of its users,
    kept under a small guard lock), so the map holds the names in use now, not every name
    ever launched. Two callers for the same name always meet the same lock: the count is
    raised before either takes it, and the lock goes only when the count is back to 0."""

    def __init__(self) -> None:
        self._locks: dict[str, _NameLock] = {}
        self._guard = threading.Lock()

    @contextmanager
    def hold(self, name: str, blocking: bool = True) -> Iterator[bool]:
        with self._guard:
            entry = self._locks.get(name)
            if entry is None:
                entry = self._locks[name] = _NameLock()
            entry.users += 1
        acquired = False
        try:
            acquired = entry.lock.acquire(blocking)
            yield acquired
        finally:
            if acquired:
                entry.lock.release()
            with self._guard:
                entry.users -= 1
                if entry.users == 0:
                    del self._locks[name]

    def __len__(self) -> int:
        """How many names have a lock now (held or awaited)."""
        with self._guard:
            return len(self._locks)


@dataclass
class _NameLock:
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    users: int = 0   # holders and waiters


class Steps:
    """How long each step of an operation took, for its log line: what is slow at 3 a.m."""

    def __init__(self) -> None:
        self.started = self.last = time.monotonic()
        self.took: dict[str, int] = {}

    def done(self, step: str) -> None:
        now = time.monotonic()
        self.took[step] = round((now - self.last) * 1000)
        self.last = now

    def total_ms(self) -> int:
        return round((time.monotonic() - self.started) * 1000)

    def text(self) -> str:
        return ",".join(f"{step}={ms}" for step, ms in self.took.items())


class Domains:
    def __init__(self, config: AgentConfig, hypervisor: Hypervisor, inventory: Inventory,
                 enforcement: Enforcement, events: EventBus) -> None:
        self.config = config
        self.hv = hypervisor
        self.inventory = inventory
        self.enforcement = enforcement
        self.events = events
        self.locks = NameLocks()

    # -- launch -----------------------------------------------------------------------------------

    def launch(self, spec: LaunchSpec) -> tuple[ManagedDomain, bool]:
        """Define and start `spec`; (domain, created). Same spec again returns (existing, False),
        unless the first launch never finished (see the module's doc): then this one does."""
        with self.locks.hold(spec.name):
            existing = self.hv.get_domain(spec.name)
            if existing is not None:
                return self._existing(existing, spec)
            image = resolve_image(self.config.image_dir, spec.image)
            if spec.kernel_cmdline and not image.boots_kernel:
                raise InvalidField("kernel_cmdline", f"image {spec.image!r} boots from its own disk; "
                                                        "a kernel command line needs a kernel image")
            steps = Steps()
            with self.enforcement.launching(spec.name):
                self._create(spec, image, steps)
                return self._launched(spec, steps), True

    def _launched(self, spec: LaunchSpec, steps: Steps) -> ManagedDomain:
        """The domain runs: put its class on, log it, and return it as it is now."""
        record = self.hv.get_domain(spec.name)
        if record is None:
            raise LaunchFailed(f"{spec.name} vanished right after it started")
        meta = self.inventory.ours(record)
        if meta is None:   # redefined by someone else between its start and now
            raise LaunchFailed(f"{spec.name} started but no longer carries this agent's metadata: "
                               f"{self.inventory.not_ours(record)}")
        interfaces = read_shape(record.xml).interfaces
        steps.done("read_back")
        self.enforcement.launched(spec.name, DomainInfo(meta.role, meta.priority_class, spec.memory_mib, interfaces))
        steps.done("class")
        log_event(log, "domain.launched", domain=spec.name, role=role_of(spec.role).value, priority_class=spec.role.value, vcpus=spec.vcpus,
                  memory_mib=spec.memory_mib, image=spec.image, lease_id=spec.lease_id,
                  domain_type=self.inventory.domain_type, took_ms=steps.total_ms(), steps_ms=steps.text())
        return managed_domain(record, meta)

    def _existing(self, record: DomainRecord, spec: LaunchSpec) -> tuple[ManagedDomain, bool]:
        meta = self.inventory.ours(record)
        if meta is None:
            raise DomainConflict(f"a domain named {spec.name!r} already exists: {self.inventory.not_ours(record)}")
        domain = managed_domain(record, meta)
        differences = spec_differences(domain, spec)
        if differences:
            raise DomainConflict(f"domain {spec.name!r} exists with another spec: {'; '.join(differences)}")
        if meta.started:
            return domain, False
        # The launch that defined it never finished (its agent died): finish it now.
        steps = Steps()
        log_event(log, "domain.launch_resumed", domain=spec.name, state=record.state)
        with self.enforcement.launching(spec.name):
            try:
                if not record.active:
                    self.hv.start(spec.name)
                self.mark_started(spec.name, meta)
            except HypervisorError as exc:
                overlay = Path(meta.overlay) if meta.overlay else None
                self._rollback(spec.name, True, overlay)
                log_event(log, "domain.launch_failed", logging.ERROR, domain=spec.name, error=str(exc))
                raise rolled_back(spec.name, exc) from None
            steps.done("resume")
            return self._launched(spec, steps), True

    def mark_started(self, name: str, meta: GleanerMetadata) -> None:
        """Say in the domain's metadata that it has been started (it is no half-made launch)."""
        self.hv.set_metadata(name, metadata_xml(dataclasses.replace(meta, started=True)), PREFIX, NAMESPACE)

    def _create(self, spec: LaunchSpec, image: BootImage, steps: Steps) -> None:
        """Overlay, define, start; on any failure undo what was done, then raise its error
        (rolled_back)."""
        overlay: Path | None = None
        defined = False
        try:
            if image.disk is not None:
                overlay = create_overlay(self.config.overlay_dir, spec.name, image.disk, image.disk_format)
                steps.done("overlay")
                crash_point("launch.after_overlay")
            xml = build_domain_xml(spec, image, self.inventory.domain_type, overlay,
                                   console_path(self.config.console_dir, spec.name), datetime.now(timezone.utc),
                                   cpu_shares=self.enforcement.launch_shares(),
                                   disk=self.enforcement.disk_setting(spec.role), network=self.config.network_attach,
                                   agent_id=self.config.agent_id,
                                   work_channel=channel_path(self.config.console_dir, spec.name)
                                   if spec.has_work_channel else None)
            meta = read_metadata(xml)   # what mark_started writes back once the domain runs
            if meta is None:   # build_domain_xml always writes it: a bug, caught before anything is defined
                self._rollback(spec.name, False, overlay)
                log_event(log, "domain.launch_failed", logging.ERROR, domain=spec.name, error="XML without metadata")
                raise LaunchBug(f"the XML built for {spec.name!r} carries no Gleaner metadata; "
                                "nothing was defined")
            self.hv.define(xml)
            defined = True
            steps.done("define")
            crash_point("launch.after_define")
            self.hv.start(spec.name)
            steps.done("start")
            crash_point("launch.after_start")
            self.mark_started(spec.name, meta)
            steps.done("mark_started")
        except (HypervisorError, OverlayError) as exc:
            self._rollback(spec.name, defined, overlay)
            log_event(log, "domain.launch_failed", logging.ERROR, domain=spec.name, error=str(exc))
            raise rolled_back(spec.name, exc) from None

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
            delete_overlay(overlay, self.config.overlay_dir)
        self._remove_logs(name)

    # -- class ------------------------------------------------------------------------------------

    def set_class(self, name: str, cls: PriorityClass) -> ManagedDomain:
        """Promote or demote a domain: in its metadata (so it survives restarts) and its cgroup."""
        with self.locks.hold(name):
            record, meta = self.inventory.lookup(name)
            updated = dataclasses.replace(meta, priority_class=cls)
            with self.enforcement.changing_class():
                self.hv.set_metadata(name, metadata_xml(updated), PREFIX, NAMESPACE)
                self.inventory.note_change(name)  # the next pass re-reads it, whenever libvirt's event arrives
                if record.active:
                    self.enforcement.apply_class(name, cls, bool(meta.overlay), read_shape(record.xml).interfaces)
            if cls is not meta.priority_class:
                self.events.publish(Event("class.changed", name, f"{meta.priority_class.value} -> {cls.value}",
                                          {"from": meta.priority_class.value, "to": cls.value}))
            fresh = self.hv.get_domain(name)
            if fresh is None:   # undefined behind the agent's back (its lock is held here)
                raise DomainNotFound(f"domain {name!r} vanished right after its class was set")
            return managed_domain(fresh, updated, self.enforcement.priority.is_boosted(name))

    # -- terminate --------------------------------------------------------------------------------

    def terminate(self, name: str, force: bool = False, grace_seconds: int | None = None) -> TerminationResult:
        """Stop a managed domain (gracefully unless forced) and remove it with its overlay."""
        grace = validate_grace(self.config.grace_seconds if grace_seconds is None else grace_seconds)
        with self.locks.hold(name):
            record, meta = self.inventory.lookup(name)
            started = time.monotonic()
            if not record.active:
                outcome, detail = TerminationOutcome.ALREADY_STOPPED, f"it was already {record.state}"
            elif force:
                self.hv.destroy(name)
                outcome, detail = TerminationOutcome.DESTROYED_FORCED, "destroyed at once, as asked"
            else:
                outcome, detail = self._stop_gracefully(name, grace, started)
            duration = time.monotonic() - started
            self.remove(name, meta)
        log_event(log, "domain.terminated", domain=name, role=role_of(meta.role).value,
                  priority_class=meta.priority_class.value, outcome=outcome.value,
                  duration_s=round(duration, 3), grace_s=grace, detail=detail)
        return TerminationResult(name, outcome, duration, detail)

    def _is_active(self, name: str) -> bool:
        try:
            return is_active_state(self.hv.state(name))
        except NoSuchDomain:
            return False
        except HypervisorError as exc:  # libvirtd away for a moment (a restart): ask again next poll
            log_event(log, "domain.state_unknown", logging.WARNING, domain=name, error=str(exc))
            return True

    def _stop_gracefully(self, name: str, grace: int, started: float) -> tuple[TerminationOutcome, str]:
        try:
            if self.hv.state(name) == "paused":  # a paused guest cannot see the power button
                self.hv.resume(name)
            self.hv.shutdown_acpi(name)
        except HypervisorError as exc:
            self.hv.destroy(name)
            return TerminationOutcome.DESTROYED_AFTER_GRACE, f"ACPI shutdown failed ({exc}); destroyed"
        log_event(log, "domain.power_button_pressed", logging.DEBUG, domain=name, grace_s=grace)
        crash_point("terminate.after_acpi")
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

    def remove(self, name: str, meta: GleanerMetadata) -> None:
        """Forget a stopped domain, undefine it and delete its overlay and its state file, if it
        was hibernated (the caller holds its lock)."""
        self.inventory.forget(name)
        self.enforcement.forget(name)
        freed = statefiles.delete(self.config.hibernation_dir, name)   # a crash after it: a stopped domain, reaped
        if freed:
            log_event(log, "hibernate.discarded", domain=name, lease_id=meta.lease_id, state_bytes=freed,
                      note="a hibernated domain was removed: the work its state file held is lost")
        try:
            self.hv.undefine(name)
        except NoSuchDomain:
            pass
        crash_point("terminate.after_undefine")
        self._remove_logs(name)   # first: a crash after it leaves only the overlay, which is swept
        overlay = Path(meta.overlay) if meta.overlay else overlay_path(self.config.overlay_dir, name)
        delete_overlay(overlay, self.config.overlay_dir)   # only inside the overlay directory

    def _remove_logs(self, name: str) -> None:
        """A gone domain's work channel; its console log too when none is kept (else the reaper
        removes it console_keep_seconds after its last line)."""
        kinds = (WORK,) if self.config.console_keep_seconds else (WORK, CONSOLE)
        remove_domain_files(self.config.console_dir, name, kinds)
