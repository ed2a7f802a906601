"""The pool's books as a pure state machine: leases, requests, nodes.

Every input is a call with the time passed in (an agent's report, an on-demand request, a
release, an agent's answer to a launch or stop, a tick); every output is a list of effects as
data. A Write (rows to insert or update and audit events, one transaction) always comes before
the calls it authorises (Launch, Stop). The service and the simulator carry the effects out
by the same rules (controller.effects). Nothing here reads a clock,
opens a socket or a file.

The lease states, what each holds and its deadline are in controller.core.records.

A victim on notice keeps its memory but not its vCPUs: it runs at the volunteer class (cpu.idle),
so a foreground vCPU gets a CPU the moment it wants one. A lost VM keeps its room: it may come
back. So when the node's memory, less a headroom,
holds the new VM beside its victims, the new VM starts at once and the victims get a notice
period to shut down cleanly ("instant" path); otherwise it waits for their memory ("after
victims" path). A stop counts as done when the agent confirms it or the node's report no
longer shows the VM; a failed stop is retried until its deadline, never taken as done. A VM a
node reports that no live lease explains (one that ended, or clashes with another lease) still
counts against its node, so the books never promise what the node does not have: a lease
waiting for its victims' memory starts only once they are confirmed stopped (a victim whose stop
expired unconfirmed may still run), and never while its node runs more than the books explain.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .books import AUDIT_NODES, ROLES, Books, NodeState, shared_size
from .batch_fill import BatchFilling
from .bounds import TenantBounds
from .goal_sizing import GoalSizing
from .filling import Filling
from .idleness import GUEST_CLOCK_TOLERANCE_S, IDLE_CPU_CORES, Idleness, shows_idle
from .lifecycle import MAX_LAUNCH_BACKOFF_SECONDS, Lifecycle
from .matching import ReportMatching
from .records import (RESUMING, STOP_UNCONFIRMED, STOPS, Ask, BackfillConfig, Lease, LedgerSettings, RequestRecord, Reserve,
                      TenantRecord)
from .requests import Requests
from .reserve_settings import Hint, ReserveSettings
from .reserves import DemandHistory
from .tenancy import TenancySettings
from .views import Views
from .volunteers import VolunteerSelection

__all__ = ["AUDIT_NODES", "GUEST_CLOCK_TOLERANCE_S", "IDLE_CPU_CORES", "MAX_LAUNCH_BACKOFF_SECONDS", "ROLES",
           "Ledger", "NodeState", "shared_size", "shows_idle"]


class Ledger(ReportMatching, Idleness, Requests, GoalSizing, BatchFilling, Filling, VolunteerSelection, Lifecycle, TenantBounds, Views, Books):
    """The books with their stages: the kernel (books.py) alone books a lease; each stage, a module
    of its own, owns the state its _init_ method sets and changes the books through the kernel."""

    def __init__(self, settings: LedgerSettings, backfill: BackfillConfig, reserves: Mapping[str, Reserve],
                 new_id: Callable[[str], str], leases: Iterable[Lease] = (),
                 requests: Iterable[RequestRecord] = (), ended: Iterable[Lease] = (),
                 reserve_settings: ReserveSettings = ReserveSettings(), hints: Iterable[Hint] = (),
                 history: DemandHistory | None = None, reserved_nodes: Iterable[str] = (),
                 tenants: Iterable[TenantRecord] = (), tenancy: TenancySettings = TenancySettings(),
                 goals_done: Iterable[str] = (), on_demand_lives: Iterable[tuple[float, float]] | None = None,
                 goal_progress: Any = None) -> None:
        """`new_id(prefix)` makes lease ids (random in the service, counted in the simulator).
        Live leases and pending requests from the store are unfinished business: each lease's node
        re-drives it (launch or stop again) when it next reports; a pending request without a
        lease waits for room again from when it was made (its window may be over: the next retry
        rejects it). `ended` are the most recently ended leases: a VM a node still runs under one
        of them is stopped, not adopted. `reserve_settings`, `hints` and `history` are Balancer's
        reserves (controller.core.reserves): with the defaults nothing is reserved; `reserved_nodes`
        are the nodes they kept free when the controller stopped. `tenants` are the pool's tenants
        (controller.core.bounds; none given: only the built-in, unbounded ones), `tenancy` the pool's
        RBT and URR, `goals_done` the tenants whose goal's job was done (granted nothing until a new goal),
        `on_demand_lives` the (launched_at, ended_at) of the last on-demand VMs that ended, oldest
        end first (None: those among `ended`), `goal_progress` the progress book's snapshot as last
        saved (ProgressBook.snapshot; None: none)."""
        self._init_books(settings, backfill, new_id)
        self._init_idleness(backfill)
        self._init_filling(reserves, reserve_settings, hints, history, reserved_nodes)
        self._init_requests()
        self._init_lifecycle()
        self._init_views(backfill)
        self._init_bounds()
        self._init_goals()
        self._init_volunteers()
        self._init_matching()
        self._load(list(leases), list(requests), list(ended))
        if on_demand_lives is not None:   # the store's own answer: `ended` may hold fewer of them
            self.on_demand_lives.clear()
            self.on_demand_lives.extend(on_demand_lives)
        self.tenancy_settings = tenancy
        self.set_tenants(tenants)
        self.load_goals_done(goals_done)
        if goal_progress is not None:
            self.load_goal_progress(goal_progress)

    def _load(self, leases: list[Lease], requests: list[RequestRecord], ended: list[Lease]) -> None:
        """The books as the store had them: unfinished business is asked again when its node reports."""
        for lease in sorted(ended, key=lambda l: l.ended_at or 0.0):   # oldest first: the bounded tables drop the oldest
            self._retire(lease, lease.ended_at or 0.0)
        for lease in leases:
            self._book(lease, now=0.0)
        for record in requests:
            if record.outcome == "pending":
                self.requests[record.request_id] = record
                if record.lease_id is None:   # it waited for room when the controller stopped
                    until = record.wait_until if record.wait_until is not None else \
                        record.created_at + self.reserve_settings.wait_seconds   # a row from before wait_until
                    self.waiting[record.request_id] = (Ask(record.vcpus, record.memory_mib, record.image,
                                                           record.owner, record.request_id), record.created_at, until)
        self._redrive_nodes = {l.node_id for l in self.leases.values() if l.state in STOPS | {"starting", "waiting", RESUMING}}
        waited_for = {r.request_id for r in self.requests.values() if r.outcome == "pending" and r.lease_id}
        self.unconfirmed = {l.lease_id for l in ended if l.state == "failed" and l.request_id in waited_for
                            and l.role == "backfill" and l.end_reason.startswith(STOP_UNCONFIRMED)}
