"""On-demand requests: placement (controller.core.policy), the booking of the new lease and its
victims in one Write, and the wait for room (Balancer's wait window).
"""
from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from .policy import Decision, Preempt, Reject, place_on_demand, victims_by_tenant
from .hibernation import interruptions
from .records import (HIBERNATED, RESUMING, Ask, Audit, Effect, Launch, Lease, RequestRecord,
                      Size, VmRole, Write, replace, stable_seed, work)
from .reserves import (may_wait, wait_decision)
from .snapshot import IDLE, Pool


class Requests:
    """Stage: on-demand requests. Owns the queue of requests waiting for room; books the new lease
    and its victims through the kernel."""

    def _init_requests(self) -> None:
        # Requests that found no room, oldest first: request_id -> (the ask, when it was queued,
        # when its wait ends).
        self.waiting: OrderedDict[str, tuple[Ask, float, float]] = OrderedDict()
        self._waiting_seen = -1   # the books' version as the last retry of the waiting requests saw them

    def request(self, ask: Ask, now: float, timer: Callable[[], float] = lambda: 0.0) -> list[Effect]:
        """Decide an on-demand request and book it: the new lease and its victims, before any call.
        One that finds no room even by preemption waits for room (see _wait_until), else is rejected."""
        started = timer()
        pool = self.snapshot(now)
        unbootable = self.unbootable(pool, ask.memory_mib, ask.image)
        decision = unbootable or self._place(ask, pool)
        if not isinstance(decision, Reject):
            return self._book_request(ask, decision, now, now, (timer() - started) * 1000)
        waits = unbootable is None and decision.code != "tenant_upper_bound" and self._may_fit(pool, ask)
        until = self._wait_until(ask, now) if waits else None
        if until is not None:
            return self._queue(ask, decision.reason, now, until, (timer() - started) * 1000)
        return self._reject(ask, decision, now, (timer() - started) * 1000)

    def _wait_until(self, ask: Ask, now: float) -> float | None:
        """When the wait for room of a request that has none now ends (the wait window W), or None:
        rejected at once. Backfill never makes a request wait: placement counts every backfill VM,
        starting and stopping ones too, as free room."""
        if may_wait(len(self.waiting), self.reserve_settings) is not None:
            return None
        return now + self.reserve_settings.wait_seconds

    def _place(self, ask: Ask, pool: Pool) -> Decision:
        """Where the request goes, if its tenant's bounds allow it (controller.core.bounds)."""
        want = Size(ask.vcpus, ask.memory_mib)
        bounded = self.bounds_verdict(ask.owner, want)
        if bounded is not None:
            return bounded
        decision = place_on_demand(self.able(pool, ask.memory_mib, ask.image), want, self.backfill.termination_policy,
                                   seed=stable_seed(ask.request_id))
        if isinstance(decision, Preempt) and self._batch_fill:
            ranks = self.victim_ranks(decision.node_id)
            if ranks is not None:   # batch tenants share the node: victims first from the one most over its share
                decision = victims_by_tenant(pool, decision, want, ranks, self.backfill.termination_policy,
                                             random.Random(stable_seed(ask.request_id)))
        return decision

    @staticmethod
    def _may_fit(pool: Pool, ask: Ask) -> bool:
        """Whether some node could ever hold the request (a bad size or one larger than every node
        is rejected at once: waiting would not help). With no node known yet (a controller just
        started), nodes may still come."""
        if not (ask.vcpus > 0 and ask.memory_mib > 0):
            return False
        if not pool.nodes:
            return True
        c = pool.columns   # every node at once (a pass over the views was 1.5 % of a simulated month)
        return bool(np.any((c.capacity_vcpus >= ask.vcpus) & (c.capacity_memory >= ask.memory_mib)))

    def _reject(self, ask: Ask, rejection: Reject, now: float, decided_ms: float) -> list[Effect]:
        record = RequestRecord(ask.request_id, ask.vcpus, ask.memory_mib, ask.image, ask.owner, "rejected", None,
                               "", (), rejection.reason, now, decided_ms)
        self._remember(record)
        return [Write(requests=(record,), events=(Audit("request.rejected", detail=dict(
            request_id=ask.request_id, reason=rejection.reason, reason_code=rejection.code, vcpus=ask.vcpus,
            memory_mib=ask.memory_mib, decided_ms=round(record.decided_ms, 3))),))]

    def _queue(self, ask: Ask, cause: str, now: float, until: float, decided_ms: float) -> list[Effect]:
        """The request waits for room until `until`: written pending (path queued, with its
        deadline) before it is kept waiting, so a restart queues it again with the same deadline."""
        record = RequestRecord(ask.request_id, ask.vcpus, ask.memory_mib, ask.image, ask.owner, "pending", None,
                               "", (), cause, now, decided_ms, "queued", until)
        self._remember(record)
        self.waiting[ask.request_id] = (ask, now, until)
        return [Write(requests=(record,), events=(Audit("request.queued", detail=dict(
            request_id=ask.request_id, reason=cause, vcpus=ask.vcpus, memory_mib=ask.memory_mib,
            deadline=until, waiting=len(self.waiting))),))]

    def cancel_waiting(self, request_id: str, now: float) -> list[Effect]:
        """Withdraw a request waiting for room: written cancelled, so it is never placed (nor queued
        again after a restart). Nothing for a request that is not waiting (placed, answered, unknown)."""
        entry = self.waiting.pop(request_id, None)
        if entry is None:
            return []
        ask, queued_at, _until = entry
        waited = round(now - queued_at, 3)
        records = self._resolve(request_id, "cancelled", f"cancelled after waiting {waited:g} s for room")
        return [Write(requests=records, events=(Audit("request.cancelled", detail=dict(
            request_id=request_id, vcpus=ask.vcpus, memory_mib=ask.memory_mib, owner=ask.owner,
            waited_s=waited)),))]

    def retry_waiting(self, now: float) -> list[Effect]:
        """Requests waiting for room, oldest first: placed where room came, rejected at their deadline.
        Placement is tried again only when some node's books changed since the last retry (tick
        calls this every second), or when a request's wait ends."""
        effects: list[Effect] = []
        if not self.waiting:
            return effects
        changed, self._waiting_seen = self._books_version != self._waiting_seen, self._books_version
        for request_id, (ask, queued_at, until) in list(self.waiting.items()):
            if not changed and now < until:
                continue   # nothing freed room since it last failed, and its wait goes on
            decision = self._place(ask, self.snapshot(now))
            placeable = not isinstance(decision, Reject)
            # lengthened for backfill in transit: until is past the window (the same sum as
            # _wait_until's window, so equal to the last bit when it was not)
            verdict = wait_decision(queued_at, now, placeable, until - queued_at,
                                    decision.reason if isinstance(decision, Reject) else "",
                                    for_transit=until > queued_at + self.reserve_settings.wait_seconds)
            if verdict.action == "wait":
                continue
            del self.waiting[request_id]
            if verdict.action == "place":
                effects += self._book_request(ask, decision, now, queued_at, 0.0)
                continue
            records = self._resolve(request_id, "rejected", verdict.reason)
            effects.append(Write(requests=records, events=(Audit("request.rejected", detail=dict(
                request_id=request_id, reason=verdict.reason, reason_code="wait_expired", vcpus=ask.vcpus,
                memory_mib=ask.memory_mib, waited_s=round(now - queued_at, 3))),)))
        return effects

    def _book_request(self, ask: Ask, decision: Decision, now: float, created_at: float,
                      decided_ms: float) -> list[Effect]:
        """Book a placement: the new lease and its victims, in one Write before any call."""
        policy = self.backfill.termination_policy
        want = Size(ask.vcpus, ask.memory_mib)
        if isinstance(decision, Reject):
            raise ValueError(f"request {ask.request_id}: a rejection cannot be booked ({decision.reason})")
        node = decision.node_id
        named = [self.leases[v] for v in decision.victims] if isinstance(decision, Preempt) else []
        victims = [v for v in named if v.state == "running"]   # preemptible now: stopped for this request
        # backfill VMs starting or already stopping whose room it needs too: waited for (stop_in_transit)
        transit = [v for v in named if v.state != "running"]
        path = "free" if not named else \
            ("instant" if not transit and self._fits_beside(node, want) else "after_victims")
        s = self.settings
        stop_grace = s.notice_seconds if path == "instant" else self.backfill.grace_seconds
        # An instant victim's stop is asked once the launch is answered (Stop.after_launch); a VM
        # still starting is stopped once its own launch is answered.
        victim_deadline = now + stop_grace + s.stop_timeout + (s.launch_timeout if path == "instant" or transit else 0)
        state, deadline = ("waiting", victim_deadline + s.launch_timeout) if path == "after_victims" else \
            ("starting", now + s.launch_timeout)
        lease = self._new_lease(VmRole.ON_DEMAND, node, want, ask.image, ask.owner, state, now, deadline,
                                ask.request_id)
        cause = f"on-demand request {ask.request_id} ({ask.vcpus} vCPUs, {ask.memory_mib} MiB)"
        saves, discards = self._interruptions(node, victims, now)
        stopped = [replace(v, state="on_notice" if path == "instant" else "preempting", deadline=victim_deadline,
                           request_id=ask.request_id, end_reason=f"preempted: {cause}",
                           ending=HIBERNATED if v.lease_id in saves else "ended") for v in victims]
        seen = [self._busy_detail(v, now) for v in victims]   # from their views as placement read them
        self._book(lease, now)
        for v in stopped:
            self._book(v, now)
        cancelled, transit_effects = self._stop_in_transit(transit, cause, ask.request_id, victim_deadline, now)
        record = RequestRecord(ask.request_id, ask.vcpus, ask.memory_mib, ask.image, ask.owner, "pending",
                               lease.lease_id, node, tuple(v.lease_id for v in named), "", created_at,
                               decided_ms, path)
        self._remember(record)
        events = [Audit("request.placed", node, lease.lease_id, dict(
            request_id=ask.request_id, path=path, policy=policy.value, victims=[v.lease_id for v in named],
            decided_ms=round(record.decided_ms, 3), waited_s=round(now - created_at, 3)))]
        events += [Audit("vm.preempting", node, v.lease_id, dict(vm=v.vm_name, cause=cause, policy=policy.value,
                                                                  path=path, notice_s=stop_grace,
                                                                  interruption="hibernate" if v.lease_id in saves
                                                                  else "terminate",
                                                                  work_at_stake_vcpu_seconds=round(work(v, now), 1),
                                                                  **detail))
                   for v, detail in zip(victims, seen)]
        events += [Audit("vm.preempting", node, v.lease_id, dict(vm=v.vm_name, cause=cause, policy=policy.value,
                                                                  path=path, was=v.state, waited_for=True))
                   for v in transit]
        effects: list[Effect] = [Write(created=(lease,), updated=tuple(stopped) + cancelled, requests=(record,),
                                       events=tuple(events))]
        if state == "starting":
            effects.append(Launch(lease))
        effects += [self._ask_stop(v, stop_grace, after_launch=path == "instant") for v in stopped]
        for lease_id in discards:   # saved VMs with less at stake give the victims their disk
            effects += self._discard(self.leases[lease_id], "its node's hibernation budget went to a victim with "
                                     "more work at stake", now)
        return effects + transit_effects

    def _interruptions(self, node_id: str, victims: list[Lease], now: float) -> tuple[frozenset[str], tuple[str, ...]]:
        """Which victims are saved rather than terminated (interruption = "hibernate", within the
        node's budget), and which saved VMs are discarded to make room for them."""
        if not victims or not self.backfill.hibernates:
            return frozenset(), ()
        node = self.nodes.get(node_id)
        budget = node.hibernation_budget_mib if node is not None else 0
        on_node = self.by_node.get(node_id, {}).values()
        asleep = [l for l in on_node if l.state == HIBERNATED]
        saving = sum(l.memory_mib for l in on_node if l.ending == HIBERNATED)
        plan = interruptions([(v.lease_id, v.memory_mib, work(v, now)) for v in victims],
                             [(l.lease_id, l.memory_mib, work(l, now)) for l in asleep],
                             budget - saving - sum(l.memory_mib for l in asleep))
        return frozenset(plan.hibernate), plan.discard

    def _stop_in_transit(self, transit: list[Lease], cause: str, request_id: str, deadline: float,
                         now: float) -> tuple[tuple[Lease, ...], list[Effect]]:
        """Backfill VMs whose room the request needs but that cannot be stopped now: one still
        starting is cancelled (stopped as a victim once its launch is answered: Lifecycle.launch_done);
        one lost is asked to stop; one already stopping is only waited for (the request's record
        names it, so its lease waits: Lifecycle._start_waiting)."""
        booked: list[Lease] = []
        effects: list[Effect] = []
        for v in transit:
            if v.state in ("starting", RESUMING):
                booked.append(self._book(replace(v, state="cancelling", deadline=max(v.deadline or now, deadline),
                                                 request_id=request_id, end_reason=f"preempted: {cause}"), now))
            elif v.state == "lost":
                stopping = self._book(replace(v, state="preempting", deadline=deadline, request_id=request_id,
                                              end_reason=f"preempted: {cause}"), now)
                booked.append(stopping)
                effects.append(self._ask_stop(stopping, self.backfill.grace_seconds))
        return tuple(booked), effects

    def _busy_detail(self, lease: Lease, now: float) -> dict[str, Any]:
        """Under idle_first, what the guest or the CPU figures said of a victim (its view, before
        it is booked as stopping): why it was chosen."""
        if not self._tracks_cpu:
            return {}
        vm = self._vms_on[lease.node_id].views[lease.lease_id]
        since = vm.busy_since
        seen = "no CPU figure yet" if since is None else "idle" if since == IDLE else "busy"
        # where the clock came from: the guest's own word, the agent's CPU figures, or neither
        # (then it counts from the launch)
        clock = "guest" if lease.lease_id in self._guest_clock else "cpu" if since is not None else "launch"
        return dict(last_seen=seen, busy_for_s=round(vm.at_risk(now), 1), clock=clock)
