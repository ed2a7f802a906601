"""Enforcement: each running domain's class, kept true on CPU, disk and network in one place.

A class is applied when a domain is launched and when its class changes, and re-asserted
by every reconcile pass, which puts back whatever drifted (an admin, libvirtd or a restart
changed a setting behind the agent's back) and publishes one drift.corrected event per
domain per pass, naming every change it made. What the settings are comes from the pure
rules (priority); this module reads what is and applies what should be, through the host
modules. The starvation guard's ticks run here too: a boost is a CPU setting.
"""
from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from typing import Iterator

from gleaner_common.logs import log_event
from gleaner_common.vocabulary import PriorityClass

from .config import AgentConfig
from .events import Event, EventBus
from .host import blockdev, netshape
from .host.domainxml import DISK_TARGET
from .host.errors import HostRefused
from .host.hypervisor import Hypervisor, HypervisorError
from .inventory import Inventory
from .metrics import DomainInfo
from .host.settings import DiskSetting
from .priority import disk_mechanism, disk_setting, launch_shares, net_cap
from .priorityctl import PriorityController

log = logging.getLogger(__name__)


class RestoreUnprotected(HostRefused):
    """A restored domain's class could not be put on: it is not let run."""


class Enforcement:
    def __init__(self, config: AgentConfig, hypervisor: Hypervisor, inventory: Inventory,
                 priority: PriorityController, events: EventBus) -> None:
        self.config = config
        self.hv = hypervisor
        self.inventory = inventory
        self.priority = priority
        self.events = events
        self._net_notes: set[str] = set()  # what the kernel cannot do for network shaping, each published once
        # A reconcile pass and a class change never interleave: a pass that read the old class
        # would otherwise put it back right after the change (and report that as drift).
        self._class_lock = threading.Lock()
        # Domains between their start and launched(): their class is not on yet, which a pass
        # must not take for drift.
        self._launching: set[str] = set()
        # Overlays take every domain write, so their device's scheduler decides the disk mechanism.
        self.disk_scheduler = blockdev.scheduler_of(config.overlay_dir)
        self.disk_mechanism = disk_mechanism(self.disk_scheduler)
        log_event(log, "disk.policy", scheduler=self.disk_scheduler, volunteer_mechanism=self.disk_mechanism,
                  note="weights act only under bfq; volunteers are capped instead"
                  if self.disk_mechanism == "caps" else "volunteers get the low block-I/O weight")

    # -- what a class means here --------------------------------------------------------------------

    def disk_setting(self, cls: PriorityClass) -> DiskSetting:
        return disk_setting(cls, self.disk_mechanism, self.config.disk_policy)

    def launch_shares(self) -> int:
        """The CPU weight a domain is defined with (its class is put on once it runs)."""
        return launch_shares(self.priority.facts, self.priority.weights)

    # -- launch and class change ----------------------------------------------------------------------

    @contextmanager
    def changing_class(self) -> Iterator[None]:
        """Hold off reconcile passes while a domain's class changes (metadata and settings)."""
        with self._class_lock:
            yield

    @contextmanager
    def launching(self, name: str) -> Iterator[None]:
        """Reconcile passes leave `name` alone until its launch has put its class on. Without the
        class lock: a pass can wait seconds in libvirt on a dying domain, and a launch (the
        on-demand VM beside its victims) must not wait behind it."""
        self._launching.add(name)   # passes only test membership; set operations are atomic
        try:
            yield
        finally:
            self._launching.discard(name)

    def launched(self, name: str, info: DomainInfo) -> None:
        """A domain now runs: put its class on (CPU and network; its disk settings are in its XML).
        Called within launching(name), so no reconcile pass touches it meanwhile."""
        self.inventory.remember(name, info)
        self._apply_cpu(name, info.priority_class)
        self._apply_net(name, info.priority_class, info.interfaces)

    def restored(self, name: str, info: DomainInfo, has_disk: bool) -> None:
        """A domain restored from its state file, still paused: put its class on, CPU, disk and
        network (its XML is the saved one, which may predate a class change). Called within
        launching(name), before the domain is let run."""
        self.priority.forget(name)   # a new QEMU: a new cgroup
        self.inventory.remember(name, info)
        try:   # strict, unlike a launch: a domain whose CPU class is not on is not let run
            changes = self.priority.apply(name, info.priority_class)
        except (OSError, ValueError) as exc:
            raise RestoreUnprotected(f"{name} is restored but its CPU class could not be put on ({exc}); it stays "
                                     "paused, and the reaper tries again") from None
        log_event(log, "priority.applied", domain=name, priority_class=info.priority_class.value,
                  changes="; ".join(changes), after="restore")
        self._apply_net(name, info.priority_class, info.interfaces)
        if has_disk:
            self._apply_disk(name, info.priority_class)

    def apply_class(self, name: str, cls: PriorityClass, has_disk: bool, interfaces: tuple[str, ...]) -> None:
        """Put a running domain in `cls` on CPU, disk and network; called within changing_class()."""
        self.inventory.set_class(name, cls)
        self._apply_cpu(name, cls)
        if has_disk:
            self._apply_disk(name, cls)
        self._apply_net(name, cls, interfaces)

    def forget(self, name: str) -> None:
        self.priority.forget(name)

    def _apply_cpu(self, name: str, cls: PriorityClass) -> None:
        """Apply a running domain's class now. A failure is logged, not fatal: libvirt's
        <shares> already holds the fallback weight, and the reconciler tries again."""
        try:
            changes = self.priority.apply(name, cls)
        except (OSError, ValueError) as exc:
            log_event(log, "priority.apply_failed", logging.ERROR, domain=name, error=str(exc))
            return
        log_event(log, "priority.applied", domain=name, priority_class=cls.value, changes="; ".join(changes))

    def _apply_disk(self, name: str, cls: PriorityClass) -> None:
        want = self.disk_setting(cls)
        self.hv.set_disk_priority(name, DISK_TARGET, want.weight, want.total_bytes_sec, want.total_iops_sec)

    def _apply_net(self, name: str, cls: PriorityClass, interfaces: tuple[str, ...]) -> list[str]:
        """Shape (volunteer) or unshape (foreground) the domain's taps; returns what changed."""
        cfg = self.config
        cap = net_cap(cls, cfg.network_volunteer_to_guest_bytes_per_second,
                      cfg.network_volunteer_from_guest_bytes_per_second)
        changes: list[str] = []
        for dev in interfaces:
            try:
                changed, note = netshape.apply_cap(dev, cap)
            except (OSError, LookupError, netshape.NetlinkError) as exc:
                log_event(log, "priority.apply_failed", logging.WARNING, domain=name, interface=dev, error=str(exc))
                continue
            changes += changed
            if note and note not in self._net_notes:
                self._net_notes.add(note)
                self.events.publish(Event("network.limited", name, note, {"interface": dev}, level=logging.WARNING))
        return changes

    # -- drift ----------------------------------------------------------------------------------------

    def reconcile(self) -> dict[str, list[str]]:
        """Re-assert every running managed domain's class; returns the corrections made, and
        publishes one drift.corrected event for each domain that needed any."""
        with self._class_lock:
            return self._reconcile()

    def _reconcile(self) -> dict[str, list[str]]:
        running = self.inventory.running()
        self.inventory.set_info({name: DomainInfo(m.role, m.priority_class, shape.memory_mib, shape.interfaces)
                                 for name, m, shape in running}, keep=self._launching)
        corrected: dict[str, list[str]] = {}
        for name, meta, shape in running:
            if name in self._launching:
                continue
            cls = meta.priority_class
            changes = self._reconcile_cpu(name, cls)
            changes += self._apply_net(name, cls, shape.interfaces)
            if meta.overlay:
                changes += self._reconcile_disk(name, cls, shape.disk_caps, shape.disk_weight)
            if changes:
                corrected[name] = changes
                fields = {"class": cls.value}
                cpu_class = self.priority.effective_class(name, cls)
                if cpu_class is not cls:  # the guard has raised it for now
                    fields["cpu_class"] = cpu_class.value
                self.events.publish(Event("drift.corrected", name, "; ".join(changes), fields))
        return corrected

    def _reconcile_cpu(self, name: str, cls: PriorityClass) -> list[str]:
        try:
            return self.priority.apply(name, cls)
        except (OSError, ValueError) as exc:
            log_event(log, "priority.apply_failed", logging.WARNING, domain=name, error=str(exc))
            return []

    def _reconcile_disk(self, name: str, cls: PriorityClass, have: tuple[int, int], weight: int | None) -> list[str]:
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
        self.inventory.note_change(name)  # read them back next pass, whenever libvirt's event arrives
        return drifted

    # -- the starvation guard ---------------------------------------------------------------------------

    def guard_interval(self) -> float:
        return self.priority.guard_interval()

    def guard_tick(self) -> None:
        volunteers = {n: i.priority_class for n, i in self.inventory.domain_info().items()
                      if i.priority_class is PriorityClass.VOLUNTEER}
        self.priority.guard_tick(volunteers)
