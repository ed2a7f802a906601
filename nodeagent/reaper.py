"""The reaper: removes what no one will come back for.

* A volunteer that stopped on its own: its work is disposable, so once its guest is off
  there is nothing to keep. A hibernated volunteer (stopped, with a complete state file) is
  not: its state file is its work, and it is left alone, overlay and all.
* State files settled first, each pass (nodeagent/hibernation.py, reconcile).
* A domain of ours that is stopped and was never started (its metadata says started=no):
  the agent died between defining and starting it, and the launch never returned. Once it
  is older than lifecycle.unfinished_launch_seconds (its launched_at is when it was
  defined), it is removed with its overlay, whatever its role. Until then a repeated launch
  of the same name and spec (the controller's retry) finishes it instead.
* A running domain still marked started=no (the agent died right after starting it) is
  marked started: it is a running domain like any other.
* An overlay whose domain does not exist (the agent died between making the overlay and
  defining the domain, or between undefining it and deleting the overlay).
* The console log of a domain that no longer exists, lifecycle.console_keep_seconds after its
  last line (host/logfiles.py), with anything else virtlogd kept for it; looked for at start-up,
  then every tenth of that time but at least once a minute (console_sweep_seconds).
* Console logs of ended domains, oldest first, while all console logs together exceed
  lifecycle.console_budget_mib (in the same sweep, after the expired ones): each file removed
  is logged with its size. A running or hibernated domain's logs stay, whatever the budget.

Stopped domains are listed only when libvirt reported an event since the last pass (or
every FULL_REFRESH_PASSES passes, in case one was missed). The agent reaps once at start-up,
so a restarted agent heals what a crash left before its periodic passes begin.
"""
from __future__ import annotations

import logging
import time
from datetime import datetime, timezone

from gleaner_common.logs import log_event
from gleaner_common.vocabulary import PriorityClass, role_of

from .config import AgentConfig
from .domains import Domains
from .hibernation import Hibernation
from .host import statefiles
from .host.domainxml import GleanerMetadata
from .host.hypervisor import Hypervisor, HypervisorError
from .host.images import delete_overlay, list_overlays
from .host.logfiles import all_logs, domain_files, domain_logs, expired_names, over_budget, remove_files
from .inventory import FULL_REFRESH_PASSES, Inventory

log = logging.getLogger(__name__)
CONSOLE_SWEEP_SECONDS = 60.0
NAMES_LOGGED = 10   # a sweep's log line names this many domains at most
MIB = 2**20


def console_sweep_seconds(config: AgentConfig) -> float:
    """How often expired console logs are looked for: every tenth of the time they are kept (one
    outlives it by at most a tenth), but at least once a minute and at most once a reap pass."""
    return max(min(config.console_keep_seconds / 10, CONSOLE_SWEEP_SECONDS), config.reap_interval_seconds)


class Reaper:
    def __init__(self, config: AgentConfig, hypervisor: Hypervisor, inventory: Inventory, domains: Domains,
                 hibernation: Hibernation | None = None) -> None:
        self.config = config
        self.hibernation = hibernation
        self.hv = hypervisor
        self.inventory = inventory
        self.domains = domains
        self._passes = 0
        self._recheck = False  # an unfinished launch was left for now: list stopped domains again
        self._next_console_sweep = 0.0   # monotonic: at the first pass

    def reap(self) -> list[str]:
        """One pass; returns what was removed, for logs and tests."""
        self._passes += 1
        hinted = self.inventory.take_reap_hint()
        # first: state files settled (nodeagent/hibernation.py), so a half-saved domain is a
        # stopped one below, and a hibernated one is known as such
        removed = self.hibernation.reconcile() if self.hibernation else []
        recheck = self.hibernation.recheck if self.hibernation else False
        if hinted or self._recheck or recheck or self._passes % FULL_REFRESH_PASSES == 0:
            removed += self._reap_stopped()
        self._mark_running_started()
        removed += self._remove_orphan_overlays()
        if time.monotonic() >= self._next_console_sweep:
            self._next_console_sweep = time.monotonic() + console_sweep_seconds(self.config)
            removed += self._remove_expired_console_logs()
            removed += self._keep_console_logs_within_budget()
        return removed

    def _unfinished_launch_is_young(self, meta: GleanerMetadata) -> bool:
        age = (datetime.now(timezone.utc) - meta.launched_at).total_seconds()
        return age < self.config.unfinished_launch_seconds

    def _reap_stopped(self) -> list[str]:
        self._recheck = False
        removed = []
        # cheap: few domains are ever off
        for record, meta in self.inventory.managed_records(inactive_only=True):
            if record.active or (meta.role is not PriorityClass.VOLUNTEER and meta.started):
                continue
            with self.domains.locks.hold(record.name, blocking=False) as free:
                current = self.hv.get_domain(record.name) if free else None
                if current is None or current.active:
                    continue
                meta = self.inventory.ours(current)  # as it is now, under the lock
                if meta is None or (meta.role is not PriorityClass.VOLUNTEER and meta.started):
                    continue
                if self._hibernated(record.name):
                    continue   # its state file is its work: it waits for ResumeDomain or TerminateDomain
                if not meta.started and self._unfinished_launch_is_young(meta):
                    self._recheck = True  # a repeated launch may still finish it
                    continue
                self.domains.remove(record.name, meta)
                removed.append(record.name)
                if meta.started:
                    log_event(log, "volunteer.reaped", domain=record.name, state=current.state)
                else:
                    log_event(log, "domain.unstarted_removed", domain=record.name, role=role_of(meta.role).value,
                              state=current.state, note="defined but never started: its launch never finished")
        return removed

    def _hibernated_names(self) -> set[str]:
        return {name for name, saved in statefiles.list_state_files(self.config.hibernation_dir).items()
                if saved.kind is statefiles.Kind.COMPLETE}

    def _hibernated(self, name: str) -> bool:
        saved = statefiles.read_state_file(self.config.hibernation_dir, name)
        return saved is not None and saved.kind is statefiles.Kind.COMPLETE

    def _mark_running_started(self) -> None:
        """Running domains the last reconcile pass saw still marked started=no."""
        for name, meta, _shape in self.inventory.last_running():
            if meta.started:
                continue
            with self.domains.locks.hold(name, blocking=False) as free:
                if not free:
                    continue  # a launch or terminate is at it
                try:
                    record, meta = self.inventory.lookup(name)
                    if not record.active or meta.started:
                        continue
                    self.domains.mark_started(name, meta)
                except (LookupError, PermissionError):
                    continue  # gone, or no longer ours
                except HypervisorError as exc:
                    log_event(log, "domain.mark_started_failed", logging.WARNING, domain=name, error=str(exc))
                    continue
                self.inventory.note_change(name)
                log_event(log, "domain.marked_started", domain=name,
                          note="it was started by a launch that never finished")

    def _remove_orphan_overlays(self) -> list[str]:
        removed = []
        running = self.inventory.last_running_names()  # seen running by the last reconcile: surely not orphans
        for name, path in list_overlays(self.config.overlay_dir).items():
            if name in running:
                continue
            with self.domains.locks.hold(name, blocking=False) as free:
                if free and self.hv.get_domain(name) is None and delete_overlay(path, self.config.overlay_dir):
                    removed.append(f"overlay:{name}")
                    log_event(log, "overlay.orphan_removed", domain=name, path=str(path))
        return removed

    def _remove_expired_console_logs(self) -> list[str]:
        """Console logs (and whatever else virtlogd kept) of domains that no longer exist, once
        console_keep_seconds have passed since their last line. A domain that still exists
        keeps its files however old (a stopped on-demand VM, a guest that has said nothing).
        Under the domain's lock its files are read again: a launch of the same name since the
        scan has written a fresh log, which stays."""
        keep, console_dir = self.config.console_keep_seconds, self.config.console_dir
        candidates = expired_names(console_dir, time.time(), keep)
        if candidates:
            running = self.inventory.last_running_names()
            candidates = [n for n in candidates if n not in running]
        if candidates:   # stopped domains keep theirs too: one listing rather than a lookup each
            defined = {record.name for record in self.hv.list_domains(inactive_only=True)}
            candidates = [n for n in candidates if n not in defined]
        removed: list[str] = []
        files = 0
        try:
            for name in candidates:
                with self.domains.locks.hold(name, blocking=False) as free:
                    if not free or self.hv.get_domain(name) is not None:
                        continue
                    cutoff = time.time() - keep
                    found = domain_files(console_dir, name)
                    if found and all(mtime < cutoff for _path, mtime in found):
                        files += remove_files(path for path, _mtime in found)
                        removed.append(name)
        finally:   # libvirtd gone mid-sweep: what was removed is still said
            if removed:
                more = len(removed) - NAMES_LOGGED
                log_event(log, "console.logs_expired", domains=len(removed), files=files,
                          names=",".join(removed[:NAMES_LOGGED]) + (f" and {more} more" if more > 0 else ""),
                          keep_s=keep, dir=str(console_dir),
                          note="console logs of domains gone for longer than lifecycle.console_keep_seconds")
        return [f"console:{name}" for name in removed]

    def _keep_console_logs_within_budget(self) -> list[str]:
        """While all console logs together exceed lifecycle.console_budget_mib, remove those of
        ended domains (gone, or defined but not running), the one whose last line is oldest
        first. Under each domain's lock it is looked up again, so a domain launched since the
        scan keeps its fresh log; a running domain's files are never removed."""
        budget, console_dir = self.config.console_budget_mib * MIB, self.config.console_dir
        logs = all_logs(console_dir)
        total = sum(item.size for item in logs)
        if total <= budget:
            return []
        removed: list[str] = []
        # a hibernated domain's files stay like a running one's: its work channel is its work clock
        kept = self.hv.active_domain_names() | self._hibernated_names()
        for candidate in over_budget(logs, budget, kept):
            if total <= budget:
                break
            with self.domains.locks.hold(candidate.name, blocking=False) as free:
                record = self.hv.get_domain(candidate.name) if free else None
                if not free or (record is not None and (record.active or self._hibernated(candidate.name))):
                    continue
                total -= self._remove_for_budget(candidate.name, budget)
                removed.append(candidate.name)
        if total > budget:
            log_event(log, "console.budget_exceeded", logging.WARNING, total_bytes=total, budget_bytes=budget,
                      dir=str(console_dir), note="what is left belongs to running domains (or is being launched); "
                      "raise lifecycle.console_budget_mib or lower virtlogd's max_size")
        return [f"console-budget:{name}" for name in removed]

    def _remove_for_budget(self, name: str, budget: int) -> int:
        """Remove an ended domain's console files (its lock is held); the bytes freed."""
        current = domain_logs(self.config.console_dir, name)   # as they are now, under the lock
        freed = 0
        for path, size in current.files if current else ():
            if remove_files([path]):
                freed += size
                log_event(log, "console.log_removed_over_budget", domain=name, path=str(path), bytes=size,
                          budget_bytes=budget, note="console logs exceed lifecycle.console_budget_mib; "
                          "ended domains' go first, oldest first")
        return freed
