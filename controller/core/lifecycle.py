"""The lease state machine: the agents' answers to launches and stops, releases, deadlines and
liveness. A lease waiting for its victims' memory starts only once they are confirmed stopped,
and never while its node runs more than the books explain.
"""
from __future__ import annotations

from .records import (DISCARDED, DISCARDING, DRAINED, HIBERNATED, RESUMING, STOP_UNCONFIRMED, STOPS, UNREACHABLE, VICTIM,
                      Audit, Effect, Launch, Lease, LeaseError, Resume, Stop, Write, replace, stop_event, work)


MAX_LAUNCH_BACKOFF_SECONDS = 300.0


def liveness_verdict(state: str, silent_s: float, suspect_after: float, down_after: float) -> str | None:
    """What a node's silence makes of it: an up node silent longer than suspect_after becomes
    "suspect" (nothing new placed there), a suspect one silent longer than down_after "down"
    (its running VMs lost); None: no change. One step per tick."""
    if state == "up" and silent_s > suspect_after:
        return "suspect"
    if state == "suspect" and silent_s > down_after:
        return "down"
    return None


class Lifecycle:
    """Stage: the lease state machine (answers, releases, deadlines, liveness). Owns the
    retries, outstanding stop calls, launch back-off and unconfirmed stops; books every transition
    through the kernel."""

    def _init_lifecycle(self) -> None:
        # Victims whose stop expired unconfirmed: their VM may still run, so the lease waiting for
        # their memory never starts (its own deadline ends it). Rebuilt from the store on a restart
        # (the victims' ended rows: _load); dropped with the request they blocked.
        self.unconfirmed: set[str] = set()
        self.retry_at: dict[str, float] = {}   # lease -> when to try its failed stop again
        # node -> (until, failures in a row): a node whose launches fail gets no backfill for a
        # while, doubling, so a broken image or agent is not asked again at once, forever.
        self.launch_backoff: dict[str, tuple[float, int]] = {}
        self.stop_calls: set[str] = set()       # leases whose stop was asked and not yet answered
        self.gone_since: dict[str, float] = {}  # ... and that a report already showed gone
        self.started_at: float | None = None    # the first tick: leases on nodes silent since then are lost

    def _lease_ended(self, lease_id: str) -> None:
        self.retry_at.pop(lease_id, None)
        self.stop_calls.discard(lease_id)
        self.gone_since.pop(lease_id, None)
        super()._lease_ended(lease_id)

    def launch_done(self, lease_id: str, ok: bool, detail: str, now: float) -> list[Effect]:
        lease = self.leases.get(lease_id)
        if lease is None or lease.state not in ("starting", "cancelling"):
            return []   # the report already settled it, or it ended meanwhile
        if lease.state == "cancelling":
            if not ok:
                why = "preempted" if lease.end_reason.startswith("preempted") else "released"
                return [self._end(lease, "ended", f"{why} before it started; the launch failed: {detail}", now)] + \
                    self._start_waiting(lease.node_id, now)   # a request may wait for its room
            return self._stop_cancelled(lease, now, launched=now)
        if not ok:
            detail_of = dict(vm=lease.vm_name, reason=detail)
            if lease.role == "backfill":
                detail_of["backfill_paused_s"] = self._back_off(lease.node_id, now)
            ended = self._end(lease, "failed", detail, now, kind="vm.launch_failed", detail=detail_of)
            return [replace(ended, requests=self._resolve(lease.request_id, "failed", detail))]
        self.launch_backoff.pop(lease.node_id, None)
        return [self._running(lease, now, launched_at=now)]

    def _back_off(self, node_id: str, now: float) -> float:
        """No backfill on this node for a while after a failed launch; returns for how long."""
        until, failures = self.launch_backoff.get(node_id, (0.0, 0))
        if now < until:
            return round(until - now, 3)   # launches asked together failing together: one pause
        pause = min(self.settings.retry_seconds * 2 ** failures, MAX_LAUNCH_BACKOFF_SECONDS)
        self.launch_backoff[node_id] = (now + pause, failures + 1)
        return pause

    def _running(self, lease: Lease, now: float, launched_at: float | None) -> Write:
        """Only the agent's answer to the launch makes a lease running (a report may show the VM
        while QEMU still starts); after a crash, the launch asked again brings that answer."""
        running = self._book(replace(lease, state="running", deadline=None,
                                     launched_at=lease.launched_at or launched_at or now), now)
        detail = dict(role=lease.role, vm=lease.vm_name, vcpus=lease.vcpus, memory_mib=lease.memory_mib)
        if lease.request_id and lease.role == "on_demand":
            detail.update(request_id=lease.request_id, seconds=round(now - lease.created_at, 3))
        return Write(updated=(running,), requests=self._resolve(lease.request_id, "placed") if lease.role ==
                     "on_demand" else (), events=(Audit("vm.launched", lease.node_id, lease.lease_id, detail),))

    def stop_done(self, lease_id: str, outcome: str, ok: bool, seconds: float, detail: str,
                  now: float) -> list[Effect]:
        self.stop_calls.discard(lease_id)
        lease = self.leases.get(lease_id)
        if lease is None or lease.state not in STOPS:
            return []   # a report already showed it gone
        if not ok and lease.ending == HIBERNATED and outcome != UNREACHABLE:
            return self._hibernate_refused(lease, detail, now)
        if not ok:
            self.retry_at[lease_id] = now + self.settings.retry_seconds
            return [Write(events=(Audit("vm.stop_failed", lease.node_id, lease_id, dict(
                vm=lease.vm_name, error=detail, retry_in_s=self.settings.retry_seconds,
                gives_up_in_s=round((lease.deadline or now) - now, 1))),))]
        if lease.ending == HIBERNATED and outcome == HIBERNATED:
            return self._hibernated(lease, now, seconds, detail)
        return self._stopped(lease, now, dict(stopped=outcome, seconds=round(seconds, 3), detail=detail))

    # -- hibernation (interruption = "hibernate") ---------------------------------------------------

    def _hibernated(self, lease: Lease, now: float, seconds: float, detail: str) -> list[Effect]:
        """A victim's state is saved: its lease is kept, holding nothing, until it is resumed or
        waits past the limit; its work is not lost. A request waiting for its room may start."""
        limit = self.backfill.hibernate_wait_seconds
        asleep = self._book(replace(lease, state=HIBERNATED, hibernated_at=now, deadline=now + limit,
                                    ending="ended"), now)
        record = self.requests.get(lease.request_id)
        write = Write(updated=(asleep,), events=(Audit("vm.hibernated", lease.node_id, lease.lease_id, dict(
            vm=lease.vm_name, cause=lease.end_reason.removeprefix("preempted: "), path=record.path if record else "",
            policy=self.backfill.termination_policy.value, seconds=round(seconds, 3), detail=detail,
            work_kept_vcpu_seconds=round(work(asleep, now), 1), discarded_after_s=limit)),))
        return [write] + self._start_waiting(lease.node_id, now)

    def _hibernate_refused(self, lease: Lease, detail: str, now: float) -> list[Effect]:
        """The agent could not save the victim (its budget is spent, its disk short, the save
        failed): it is terminated as a victim is under interruption = "terminate"."""
        grace = self.settings.notice_seconds if lease.state == "on_notice" else self.backfill.grace_seconds
        refused = Write(events=(Audit("vm.hibernate_refused", lease.node_id, lease.lease_id, dict(
            vm=lease.vm_name, error=detail, then="terminated instead: its work since launch is lost")),))
        return [refused] + self._stop(lease, grace, now, lease.end_reason, state=lease.state)

    def resume_done(self, lease_id: str, ok: bool, detail: str, now: float, unknown: bool = False) -> list[Effect]:
        """The agent's answer to a resume: the VM runs on with its work (its time asleep is not
        work), or, restored not, is discarded with its work lost. `unknown`: the call's outcome is
        (the agent died or was unreachable mid-call, and libvirtd may have restored it): asked
        again after retry_seconds, until the resume's deadline."""
        lease = self.leases.get(lease_id)
        if lease is None or lease.state not in (RESUMING, "cancelling") or lease.hibernated_at is None:
            return []   # ended meanwhile, or answered twice
        if not ok and unknown and lease.state == RESUMING:
            self.retry_at[lease_id] = now + self.settings.retry_seconds
            return [Write(events=(Audit("vm.resume_failed", lease.node_id, lease_id, dict(
                vm=lease.vm_name, error=detail, retry_in_s=self.settings.retry_seconds,
                gives_up_in_s=round((lease.deadline or now) - now, 1))),))]
        if not ok:
            return self._discard(lease, f"its resume failed: {detail}", now)
        slept = now - lease.hibernated_at
        awake = replace(lease, slept_seconds=lease.slept_seconds + slept, hibernated_at=None)
        if lease.state == "cancelling":   # preempted or released while it resumed
            return self._stop_cancelled(self._book(awake, now), now, launched=lease.launched_at or now)
        running = self._book(replace(awake, state="running", deadline=None, end_reason="", request_id=""), now)
        return [Write(updated=(running,), events=(Audit("vm.resumed", lease.node_id, lease_id, dict(
            vm=lease.vm_name, slept_s=round(slept, 3), work_vcpu_seconds=round(work(running, now), 1))),))]

    def _resume(self, lease: Lease, now: float) -> list[Effect]:
        """Book a hibernated VM resuming (written before the call), and ask its agent."""
        resuming = self._book(replace(lease, state=RESUMING, deadline=now + self.settings.launch_timeout,
                                      end_reason="", request_id=""), now)   # no request is its any more
        return [Write(updated=(resuming,), events=(Audit("vm.resuming", lease.node_id, lease.lease_id, dict(
            vm=lease.vm_name, slept_s=round(now - (lease.hibernated_at or now), 3))),)), Resume(resuming)]

    def _discard(self, lease: Lease, why: str, now: float) -> list[Effect]:
        """Give up a hibernated VM: its agent deletes the domain and its saved state; its work is
        lost now (the stop's event says how much)."""
        # saved, it holds nothing while its state is deleted; one that was resuming holds its room until stopped
        state = DISCARDING if lease.state == HIBERNATED else "stopping"
        return self._stop(lease, 0, now, DISCARDED + why, state=state, force=True)

    def _stopped(self, lease: Lease, now: float, how: dict) -> list[Effect]:
        """A stop confirmed (by the agent, or by the node's report no longer showing the VM)."""
        if lease.ending == HIBERNATED:   # gone before its save was confirmed: stopped, its work lost
            lease = replace(lease, ending="ended")
        kind = stop_event(lease)
        detail = dict(vm=lease.vm_name, **how)
        if lease.state in VICTIM:
            record = self.requests.get(lease.request_id)
            detail.update(cause=lease.end_reason.removeprefix("preempted: "), path=record.path if record else "",
                          policy=self.backfill.termination_policy.value,
                          work_lost_vcpu_seconds=round(work(lease, now), 1))
        elif lease.end_reason.startswith((DRAINED, DISCARDED)):   # its work is lost as a victim's is
            detail.update(work_lost_vcpu_seconds=round(work(lease, now), 1))
        write = self._end(lease, lease.ending, lease.end_reason or "stopped", now, kind=kind, detail=detail)
        return [write] + self._start_waiting(lease.node_id, now)

    def _end(self, lease: Lease, state: str, reason: str, now: float, kind: str = "", detail: dict | None = None
             ) -> Write:
        ended = self._book(replace(lease, state=state, ended_at=now, end_reason=reason, deadline=None), now)
        events = (Audit(kind, lease.node_id, lease.lease_id, detail or dict(vm=lease.vm_name, reason=reason)),) \
            if kind else ()
        return Write(updated=(ended,), events=events)

    def _stop(self, lease: Lease, grace: int, now: float, reason: str, state: str = "stopping",
              ending: str = "ended", force: bool = False, launched: float | None = None) -> list[Effect]:
        stopping = self._book(replace(lease, state=state, end_reason=reason, ending=ending,
                                      deadline=now + grace + self.settings.stop_timeout,
                                      launched_at=lease.launched_at or launched), now)
        return [Write(updated=(stopping,), events=(Audit("vm.stopping", lease.node_id, lease.lease_id, dict(
            vm=lease.vm_name, reason=reason, grace_s=grace, force=force)),)), self._ask_stop(stopping, grace, force)]

    def _stop_cancelled(self, lease: Lease, now: float, launched: float) -> list[Effect]:
        """A VM released (or preempted) while it started has launched: stop it, a preempted one as
        the victim it is (its stop is then a preemption, with its work lost)."""
        if lease.end_reason.startswith("preempted"):
            return self._stop(lease, self.backfill.grace_seconds, now, lease.end_reason, state="preempting",
                              launched=launched)
        return self._stop(lease, self.backfill.grace_seconds, now, "released while starting", launched=launched)

    def _start_waiting(self, node_id: str, now: float) -> list[Effect]:
        """Waiting on-demand leases of this node whose victims are all gone start now."""
        effects: list[Effect] = []
        if not self._waiting_on.get(node_id):
            return effects   # none waits there (the common case: no pass over the node's leases)
        for lease in [l for l in self.by_node.get(node_id, {}).values() if l.state == "waiting"]:
            record = self.requests.get(lease.request_id)
            victims = record.victims if record else ()
            if any(v in self.unconfirmed or (v in self.leases and self.leases[v].state in STOPS) for v in victims):
                continue   # a victim still runs, or may: the lease's deadline decides
            view = self.view(node_id)
            if view.allocated.memory_mib > view.capacity.memory_mib:
                continue   # the node runs more than the books explain (a VM no lease holds): never overcommit
            starting = self._book(replace(lease, state="starting", deadline=now + self.settings.launch_timeout), now)
            effects += [Write(updated=(starting,), events=(Audit("request.victims_gone", node_id, lease.lease_id, dict(
                request_id=lease.request_id, waited_s=round(now - lease.created_at, 3))),)), Launch(starting)]
        return effects

    def _forget_victims(self, lease: Lease) -> None:
        """A waiting lease ends: its victims' unconfirmed stops hold nothing up any more."""
        record = self.requests.get(lease.request_id)
        if record is not None and self.unconfirmed:
            self.unconfirmed.difference_update(record.victims)

    def release(self, lease_id: str, force: bool, now: float) -> tuple[Lease, list[Effect]]:
        lease = self.leases.get(lease_id)
        if lease is None:
            raise LeaseError("lease_id", f"no live lease {lease_id!r}", not_found=True)
        grace = 0 if force else self.backfill.grace_seconds
        if lease.state in STOPS:
            raise LeaseError("lease_id", f"{lease_id} is already being stopped ({lease.state})")
        if lease.state == "waiting":
            self._forget_victims(lease)
            write = self._end(lease, "ended", "released before it started", now, kind="vm.released")
            return lease, [replace(write, requests=self._resolve(lease.request_id, "failed", "released"))]
        if lease.state == "lost":
            return lease, [self._end(lease, "ended", "released while its node did not report it", now,
                                     kind="vm.released")]
        if lease.state == HIBERNATED:   # its saved state goes with it
            effects = self._stop(lease, 0, now, "released while hibernated", state=DISCARDING, force=True)
            return self.leases[lease_id], effects
        if lease.state in ("starting", RESUMING):  # the launch may land any moment: stop it once it has
            cancelling = self._book(replace(lease, state="cancelling", end_reason="released while starting",
                                            deadline=now + self.settings.launch_timeout + grace +
                                            self.settings.stop_timeout), now)
            return cancelling, [Write(updated=(cancelling,), requests=self._resolve(lease.request_id, "failed",
                                                                                     "released while starting"),
                                      events=(Audit("vm.cancelling", lease.node_id, lease_id,
                                                    dict(vm=lease.vm_name)),))]
        effects = self._stop(lease, grace, now, "released", force=force)
        return self.leases[lease_id], effects

    def tick(self, now: float) -> list[Effect]:
        """Liveness, deadlines and retries, due at `now`."""
        effects: list[Effect] = []
        s = self.settings
        if self.started_at is None:
            self.started_at = now
        if now - self.started_at > s.down_after:  # leases on nodes that never reported since the start
            for node_id in [n for n in self.by_node if n not in self.nodes]:
                effects += self._lose(node_id, "its node has not reported since the controller started", now)
        for node in self.nodes.values():
            verdict = liveness_verdict(node.state, now - node.last_report, s.suspect_after, s.down_after)
            if verdict is not None:
                effects += self.node_found(node.node_id, verdict, now)
        for lease in [l for l in self._timed.values() if now >= l.deadline]:   # in self.leases' order
            effects += self._expired(lease, now)
        for lease_id in [i for i, at in self.retry_at.items() if now >= at]:
            del self.retry_at[lease_id]
            lease = self.leases.get(lease_id)
            node = self.nodes.get(lease.node_id) if lease else None
            if lease is not None and lease.state in STOPS and node is not None and node.state == "up":
                effects.append(self._ask_stop(lease, max(int((lease.deadline or now) - now - s.stop_timeout), 0)))
            elif lease is not None and lease.state == RESUMING and node is not None and node.state == "up":
                effects.append(Resume(lease))   # the agent resumes by name: asking again is harmless
        effects += self.retry_waiting(now)   # windows that closed
        effects += self.bounds_scaled(now)   # nodes down below the tenants' lower bounds, or back
        self._prune_cleanups(now)
        return [e for e in effects if not isinstance(e, Write) or e]

    def node_found(self, node_id: str, verdict: str, now: float) -> list[Effect]:
        """Node `node_id` found "suspect" or "down" by its silence (liveness_verdict, at tick; a
        replay takes the live controller's recorded verdicts): down, its running VMs are lost."""
        node = self.nodes[node_id]
        node.state = verdict
        effects: list[Effect] = [self._node_event(f"node.{verdict}", node, silent_s=round(now - node.last_report, 1))]
        if verdict == "down":
            effects += self._lose(node_id, "its node is down", now)
        return effects

    def _lose(self, node_id: str, reason: str, now: float) -> list[Effect]:
        effects: list[Effect] = []
        for lease in [l for l in self.by_node.get(node_id, {}).values() if l.state == "running"]:
            lost = self._book(replace(lease, state="lost", deadline=now + self.settings.lost_expiry), now)
            effects.append(Write(updated=(lost,), events=(Audit("vm.lost", node_id, lease.lease_id,
                                                                dict(vm=lease.vm_name, reason=reason)),)))
        return effects

    def _expired(self, lease: Lease, now: float) -> list[Effect]:
        """A state past its deadline ends: launches that never answered are stopped, stops that were
        never confirmed fail (the node's reports keep counting the VM if it still runs)."""
        if lease.state == "waiting":
            self._forget_victims(lease)
            write = self._end(lease, "failed", "its victims did not stop in time", now, kind="request.expired")
            return [replace(write, requests=self._resolve(lease.request_id, "failed", "victims did not stop in time"))]
        if lease.state == "starting":
            write, stop = self._stop(lease, 0, now, "the launch was not confirmed in time", ending="failed",
                                     force=True)
            return [replace(write, requests=self._resolve(lease.request_id, "failed",
                                                          "the launch was not confirmed in time")), stop]
        if lease.state == "lost":
            return [self._end(lease, "ended", f"lost for {self.settings.lost_expiry:g} s and never seen again", now,
                              kind="vm.gone")]
        if lease.state == HIBERNATED:
            return self._discard(lease, f"hibernated for {now - (lease.hibernated_at or now):.0f} s, past the "
                                        f"limit of {self.backfill.hibernate_wait_seconds} s", now)
        if lease.state == RESUMING:
            return self._discard(lease, "its resume was not confirmed in time", now)
        if lease.state in STOPS:   # the VM may still run: a waiting lease never starts beside it
            if lease.state in VICTIM:
                self.unconfirmed.add(lease.lease_id)
            return [self._end(lease, "failed", f"{STOP_UNCONFIRMED} ({lease.end_reason})", now,
                              kind="vm.stop_expired")]
        return []

    def _ask_stop(self, lease: Lease, grace: int, force: bool = False, after_launch: bool = False) -> Stop:
        self.stop_calls.add(lease.lease_id)
        return Stop(lease, grace, force, after_launch)

    def _answer_due(self, lease: Lease, now: float) -> bool:
        """Whether a report that no longer shows a stopping VM should wait for the agent's answer:
        the report usually comes first, and only the answer says how the VM ended (clean or
        forced). Briefly: a call whose answer is lost must not hold the room until the deadline."""
        if lease.lease_id not in self.stop_calls:
            return False
        since = self.gone_since.setdefault(lease.lease_id, now)
        return now - since < self.settings.retry_seconds
