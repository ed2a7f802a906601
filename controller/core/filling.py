"""The backfill launcher and Balancer's reserves: freed room to waiting requests first, the
reserves' nodes kept free, backfill launched where the plan says, VMs past their longest life
recycled.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .backfill_plan import plan_backfill
from .books import AUDIT_NODES
from .explain import FillAnswer, FillFacts, explain_fill
from .records import (DRAINED, HIBERNATED, Audit, BackfillConfig, Effect, Launch, Lease, Reserve, Size, VmRole,
                      Write)
from .reserve_settings import Hint, PredictiveMode, ReserveSettings
from .reserves import (DemandHistory, ReserveTarget, late_hint_note, live_hints, plan_for_pool, reserve_target,
                       validate_hint)
from .snapshot import rows_where


@dataclass(frozen=True)
class LaneRoom:
    """How many more backfill launches each node's agent-call lane takes (controller.bulkheads):
    `limit` for a node with none in it, `limit - used[node]` for one with some (None: no bound,
    as in the simulator). A node with no room is busy: the launcher plans nothing on it."""
    limit: int | None = None
    used: Mapping[str, int] = field(default_factory=dict)

    def room(self, node_id: str) -> int | None:
        return None if self.limit is None else max(self.limit - self.used.get(node_id, 0), 0)

    @property
    def busy(self) -> frozenset[str]:
        if self.limit is None:
            return frozenset()
        return frozenset(n for n, used in self.used.items() if used >= self.limit)

    def cap(self, launches: tuple[str, ...]) -> tuple[str, ...]:
        """The plan's launches (node ids, one per VM), each node's cut to its lane's room."""
        if self.limit is None:
            return launches
        taken: Counter[str] = Counter()
        kept = []
        for node_id in launches:
            if taken[node_id] < self.room(node_id):
                taken[node_id] += 1
                kept.append(node_id)
        return tuple(kept)


class Filling:
    """Stage: the backfill launcher and Balancer's reserves. Owns the reserves, hints, history and
    the plan's memory of idle nodes; books launches and drains through the kernel."""

    def _init_filling(self, reserves: Mapping[str, Reserve], reserve_settings: ReserveSettings,
                      hints: Iterable[Hint], history: DemandHistory | None, reserved_nodes: Iterable[str]) -> None:
        self.reserves: dict[str, Reserve] = dict(reserves)
        self.reserve_settings = reserve_settings.validate()
        self.hints: list[Hint] = list(hints)
        slots = (reserve_settings.slot_seconds, reserve_settings.utc_offset_seconds)
        # A history kept with other slots cannot be read by these: it starts afresh.
        self.history = history if history is not None and \
            (history.slot_seconds, history.utc_offset_seconds) == slots else DemandHistory(*slots)
        # kept free of backfill by the reserves (as written at the last change: a soft reserve stays)
        self.reserved_nodes: frozenset[str] = frozenset(reserved_nodes)
        # Nodes with backfill room the last plans gave no VM, unchanged since (their view and P):
        # the plan would give them none again. For the backfill config and tracking in _idle_for.
        self._backfill_idle: set[str] = set()
        self._idle_for: tuple[BackfillConfig, bool] | None = None
        self._idle_ids: list[str] | None = None   # the selection's rows and P when it last looked
        self._idle_p = np.zeros(0)
        # Why nodes with room got nothing (the controller's log; off in the simulator, for speed):
        # each node's last answer's code, and the answers that changed since the service read them
        self.explains_unfilled = False
        self._fill_said: dict[str, str] = {}
        self.fill_notes: list[FillAnswer] = []

    def _productivity_changed(self, ids: list[str], p: np.ndarray, moved: tuple | None) -> None:
        """A selection pass gave these P: a node whose P changed may get backfill now."""
        if p is self._idle_p:
            pass   # no node's P changed
        elif moved is not None and moved[0] is self._idle_p and ids is self._idle_ids:
            self._backfill_idle.difference_update([ids[i] for i in moved[1]])   # the rows that differ, known
        elif ids is self._idle_ids and len(p) == len(self._idle_p):   # a node whose P changed may get backfill
            self._backfill_idle.difference_update([ids[i] for i in rows_where(p != self._idle_p).tolist()])
        else:
            self._backfill_idle.clear()
        self._idle_ids, self._idle_p = ids, p

    def _view_rebuilt(self, node_id: str) -> None:
        """Its view changed: the plan reads the node again."""
        self._backfill_idle.discard(node_id)

    def fill(self, now: float, lanes: LaneRoom = LaneRoom()) -> list[Effect]:
        """Give freed room to waiting requests, keep the reserves' nodes free, launch backfill where
        the plan says, and recycle VMs past their longest life. `lanes`: the room in each node's
        agent-call lane; a node whose lane is full (busy) gets no backfill until it drains, and
        one with some gets no more launches than it takes."""
        config = self.backfill
        effects: list[Effect] = self.retry_waiting(now)   # room freed goes to waiting requests first
        self._refresh_views()
        self.history.record(now, max(self._od_total, 0.0))
        if not config.enabled:
            return effects
        effects += self.select(now, evaluation=False)
        effects += self._keep_reserve(now)
        if self._batch_fill:   # batch tenants share backfill: each granted its part (batch_fill.py)
            return effects + self._fill_batch_tenants(now, lanes)
        # afresh: the reserve may have changed the nodes and their VMs (read by the plan alone)
        pool = self._passing_pool(now)
        # The plan reads only the selected nodes with room for one VM (the others would get none)
        # that can boot one; the VMs of every node still count and are recycled.
        unable, roomy = self._unable(config.memory_mb, config.image), self._nodes_with_backfill_room(config.size)
        # Nor does it read the nodes it gave nothing last time whose view and P have not changed
        # since (they would get nothing again): kept without a budget, with prediction (without it
        # a node with room always gets a VM).
        idle = self._backfill_idle
        track = not config.max_instances and self.settings.use_prediction
        if self._idle_for != (config, track):
            self._idle_for = (config, track)
            idle.clear()
        candidates = roomy - idle if idle else roomy
        busy = lanes.busy
        if busy:   # their agent calls are backed up: nothing more for them until they drain
            candidates = candidates - busy
        if self._selected_by_p and 4 * len(candidates) < len(self.selected):
            # The selected nodes with room, in the selection's order (P, best first, then id)
            # without a pass over every selected node: the few with room, sorted.
            p = self.productivity
            targets = sorted((n for n in candidates if n in p and p[n] > 0 and n not in unable
                              and now >= self.launch_backoff.get(n, (0.0, 0))[0]), key=lambda n: (-p[n], n))
        else:
            targets = [n for n in self.selected if n in candidates and n not in unable
                       and now >= self.launch_backoff.get(n, (0.0, 0))[0]]
        cpu_room = self.productivity if self.settings.use_prediction else None
        plan = plan_backfill(pool, config, targets, cpu_room)
        del pool   # the live rows: nothing reads them past the plan
        launching = lanes.cap(plan.launches)
        if self.explains_unfilled:
            self._note_unfilled(roomy, launching, busy, now)
        if track:
            idle.update(targets)
            idle.difference_update(plan.launches)
        for vm_id in plan.recycles:
            effects += self._stop(self.leases[vm_id], config.grace_seconds, now,
                                  f"recycled after {config.duration_seconds} s")
        size = config.size
        for node_id in launching:
            asleep = self._oldest_asleep(node_id, size) if self._asleep_on.get(node_id) else None
            if asleep is not None:   # a hibernated VM takes its node's room back before a new one
                effects += self._resume(asleep, now)
                continue
            lease = self._new_lease(VmRole.BACKFILL, node_id, size, config.image, "backfill", "starting",
                                    now, now + self.settings.launch_timeout)
            self._book(lease, now)
            effects += [Write(created=(lease,)), Launch(lease)]
        return effects

    def _note_unfilled(self, roomy: set[str], launched: tuple[str, ...], busy: frozenset[str], now: float) -> None:
        """Nodes with room that got no VM, each said once per change of its reason (fill_notes)."""
        for node_id in launched:
            self._fill_said[node_id] = "fills"
        budget = self._budget_left()
        for node_id in sorted(roomy.difference(launched)):
            answer = explain_fill(self.fill_facts(node_id, now, budget, node_id in busy))
            if not answer.fills and self._fill_said.get(node_id) != answer.code:
                self._fill_said[node_id] = answer.code
                self.fill_notes.append(answer)

    def _budget_left(self) -> int | None:
        config = self.backfill
        return config.max_instances - sum(v.backfill_vms for v in self._node_views.values()) \
            if config.max_instances else None

    def explain(self, now: float) -> dict[str, FillAnswer]:
        """What the next fill would do with each node, and why."""
        self._refresh_views()
        budget = self._budget_left()
        return {node_id: explain_fill(self.fill_facts(node_id, now, budget)) for node_id in self.nodes}

    def fill_facts(self, node_id: str, now: float, budget_left: int | None, lane_busy: bool = False) -> FillFacts:
        """What the launcher reads of one node (explain.explain_fill says what it makes of them).
        KeyError for a node the books do not know."""
        node, view, config = self.nodes[node_id], self.view(node_id), self.backfill
        unable = ""
        if config.image not in node.images:
            unable = f"its agent does not offer the backfill image {config.image!r}"
        elif config.memory_mb < node.min_memory_mib:
            unable = f"backfill VMs of {config.memory_mb} MiB are below its agent's least ({node.min_memory_mib} MiB)"
        free = view.capacity - view.reserve - view.allocated
        return FillFacts(
            node_id=node_id, state=node.state, enabled=config.enabled, vm=config.size,
            selected=node_id in self.selected, reserved=view.backfill_excluded or node_id in self.reserved_nodes,
            unable=unable, free=free, backfill_vcpus=view.backfill_vcpus, use_prediction=self.settings.use_prediction,
            productivity=self.productivity.get(node_id), predicted_foreground=self.predicted.get(node_id),
            on_demand_cpu=node.on_demand_cpu, host_other_cpu=max(node.foreground_cpu - node.on_demand_cpu, 0.0),
            backoff_left_s=max(self.launch_backoff.get(node_id, (0.0, 0))[0] - now, 0.0), budget_left=budget_left,
            lane_busy=lane_busy)

    def _oldest_asleep(self, node_id: str, room: Size) -> Lease | None:
        """The node's VM hibernated longest that fits the room of one backfill VM (None: none)."""
        asleep = [l for l in self.by_node.get(node_id, {}).values()
                  if l.state == HIBERNATED and l.vcpus <= room.vcpus and l.memory_mib <= room.memory_mib]
        return min(asleep, key=lambda l: (l.hibernated_at or 0.0, l.lease_id), default=None)

    def _keep_reserve(self, now: float) -> list[Effect]:
        """Balancer's reserve: choose the nodes to keep free of backfill (pure: plan_for_pool), mark
        them, and give their running backfill notice (none when the reserve is soft: drain false,
        and no live hint; its nodes then stay reserved until the target shrinks)."""
        self.hints = list(live_hints(self.hints, now))
        s = self.reserve_settings
        if not (s.static_nodes or s.predictive is not PredictiveMode.OFF or self.hints or self.reserved_nodes):
            return []   # nothing reserved, nothing to release: the common case costs no snapshot
        state_of = lambda vm_id: self.leases[vm_id].state if vm_id in self.leases else "ended"   # noqa: E731
        target, chosen = plan_for_pool(self.reserve_settings, self.snapshot(now), self.hints, self.history, state_of,
                                       kept=self.reserved_nodes)
        effects: list[Effect] = []
        nodes = frozenset(chosen.nodes)
        if nodes != self.reserved_nodes:
            added, removed = sorted(nodes - self.reserved_nodes), sorted(self.reserved_nodes - nodes)
            self.reserved_nodes = nodes
            for node_id in added + removed:
                self._touch(node_id)
            effects.append(Write(events=(Audit("reserve.changed", detail=dict(   # node lists bounded: a pool is large
                target=target.as_dict(), added=added[:AUDIT_NODES], removed=removed[:AUDIT_NODES],
                added_count=len(added), removed_count=len(removed), short=chosen.short)),),
                reserved=tuple(sorted(nodes))))
        reason = DRAINED + target.explain()
        for vm_id in chosen.notices:
            lease = self.leases.get(vm_id)
            if lease is not None and lease.state == "running":
                effects += self._stop(lease, self.backfill.grace_seconds, now, reason)
        return effects

    def reserve_target(self, now: float) -> ReserveTarget:
        """The reserve at `now` (what `gleanctl reserve` shows), without changing anything."""
        up = sum(1 for n in self.nodes.values() if n.state == "up")
        return reserve_target(self.reserve_settings, now, up, live_hints(self.hints, now), self.history)

    def add_hint(self, hint: Hint, now: float) -> Write:
        """An admin's hint, checked against the pool and the live hints (ReserveError naming the
        field otherwise); the next fill drains toward it."""
        self.hints = list(live_hints(self.hints, now))
        up = sum(1 for n in self.nodes.values() if n.state == "up")
        lead = self.reserve_settings.lead_seconds
        validate_hint(hint, now, up, self.hints, lead)
        self.hints.append(hint)
        detail: dict[str, Any] = dict(nodes=hint.nodes, start_at=hint.start_at, until=hint.until, label=hint.label)
        note = late_hint_note(hint, now, lead)
        if note:
            detail["note"] = note
        return Write(events=(Audit("reserve.hint", detail=detail),), hints=tuple(self.hints))

    def cancel_hints(self, label: str, now: float) -> Write:
        """Drop the live hints with this label (every one when the label is empty)."""
        live = live_hints(self.hints, now)
        kept = [h for h in live if label and h.label != label]
        dropped = len(live) - len(kept)
        self.hints = kept
        return Write(events=(Audit("reserve.hint_cancelled", detail=dict(label=label, dropped=dropped)),),
                     hints=tuple(kept)) if dropped else Write()

    def set_reserve_settings(self, settings: ReserveSettings) -> None:
        self.reserve_settings = settings.validate()
        if (settings.slot_seconds, settings.utc_offset_seconds) != \
                (self.history.slot_seconds, self.history.utc_offset_seconds):
            self.history = DemandHistory(settings.slot_seconds, settings.utc_offset_seconds)

    def reserve_for(self, node_id: str) -> Reserve:
        return self.reserves.get(node_id) or self.reserves.get("*") or Reserve(node_id)

    def set_reserves(self, reserves: Mapping[str, Reserve]) -> None:
        self.reserves = dict(reserves)
        for node_id in self.nodes:
            self._views_stale(node_id)
