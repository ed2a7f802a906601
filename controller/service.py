"""The controller's service: it holds the ledger (controller/core/ledger.py) under one lock, feeds
it what happens (requests, releases, reports, agents' answers, the clock) and carries out what it
returns (controller.effects): the Writes of one answer are committed to the store in one
transaction, and only then are the calls they authorise made to the agents (outside the lock,
through each node's bulkhead, controller.bulkheads: stops and on-demand launches in a lane of
their own, backfill launches in a bounded one); their answers go back into the ledger. A failed commit reloads the books from the
store and calls nothing, so memory never holds what the store does not. A restarted controller
rebuilds the ledger from the store, and each node's unfinished business is asked again when the
node reports.

Crash points for tests: GLEANER_CRASH_AT=NAME[,NAME...] makes the process exit at once (as kill -9
would) at that point. Names: `after_write:KIND` (just after a Write holding an audit event of
KIND is committed, e.g. after_write:request.placed, after_write:vm.preempting), `before_call:launch`,
`before_call:stop`, `after_call:launch`, `after_call:stop` (the agent answered; the answer is not
yet recorded).
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any

from gleaner_common import authz, ids
from gleaner_common.authz import current_identity
from gleaner_common.identity import Role
from gleaner_common.ids import InvalidField
from gleaner_common.logs import log_event

from . import checks
from . import tenants as tenancy
from .agents import AgentCallFailed, AgentLinks, Stopped
from .bulkheads import Bulkheads, Lane, NodeBusy
from .config import ControllerConfig, intake_settings, ledger_settings
from .core.departures import LIFETIMES_KEPT
from .core.explain import FillAnswer
from .core.bounds import UNBOUNDED
from .core.goals import goal_from_dict
from .core.tenancy import TenancySettings
from .core.ledger import Ledger, NodeState
from .core.snapshot import NodeView
from .core.records import (REFUSED, UNREACHABLE, VICTIM, Ask, Audit, BackfillConfig, Effect, Launch, Lease, LeaseError,
                           RequestRecord, Resume, Reserve, Stop, VmRole, Write, work)
from .core.records import BACKFILL_TENANT, BUILT_IN_TENANTS, TENANT_KINDS, ZERO, Size, TenantRecord, is_dedicated
from .core.reserve_settings import Hint, ReserveError, ReserveSettings, hint_in_hours
from .core.reserves import DemandHistory, ReserveTarget, lead_warning, live_hints
from .effects import carry_out, fill_wanted
from .intake import ReportIntake, ReportStream
from .metrics import ControllerMetrics, PoolFigures
from .recording import Recorder
from .store import LeaseConflict, Store, StoreError

log = logging.getLogger(__name__)
REFUSAL_AUDIT_SECONDS = 60.0  # one report.refused audit event per node this often, however many come


class LeaseNotFound(LookupError):
    pass


class RequestNotFound(LookupError):
    pass


class AlreadyPlaced(RuntimeError):
    """A request with a lease: the lease is what to release, not the request."""


@dataclass(frozen=True)
class Preempted:
    lease: Lease
    stopped: Stopped
    work_lost: float


@dataclass(frozen=True)
class RequestResult:
    record: RequestRecord
    lease: Lease | None
    preempted: tuple[Preempted, ...] = ()
    total_seconds: float = 0.0
    policy: str = ""
    booked_ms: float | None = None   # this call's whole booking under the lock, commit included

    @property
    def decision_ms(self) -> float:
        """The booking as this call timed it, or (a repeated request) the decision as recorded."""
        return self.record.decided_ms if self.booked_ms is None else self.booked_ms


def random_id(prefix: str) -> str:
    """A lease id, and so a VM name, never used before: its first 8 hex digits are the second it
    was made, so an id can only repeat within the same second (and the store's UNIQUE constraint
    refuses that), never once retention has pruned the older lease of the same id."""
    return f"{prefix}-{int(time.time()):08x}{uuid.uuid4().hex[:8]}"


def caller_label() -> str:
    """Who an admin's call is (role/name), for the audit events it causes; "" for agents' reports
    and the controller's own work (their events name their node, or nobody asked)."""
    identity = current_identity()
    return "" if identity is None or identity.role is Role.AGENT else str(identity)


class PoolService:
    def __init__(self, config: ControllerConfig, store: Store, agents: AgentLinks,
                 clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.store = store
        store.caller = caller_label
        self.agents = agents
        self.clock = clock
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)   # notified whenever the books change
        self._stale: StoreError | None = None   # a failed write whose books could not be reloaded yet
        self.metrics = ControllerMetrics(self.pool_figures)   # counts the audit events from the first
        self._books = self._load_ledger(self._reserve_settings_at_start(config.reserves))
        self._warn_if_lead_short()
        self._launching: dict[str, Future] = {}   # lease -> its launch call, within one _apply
        self._reports: dict[str, Any] = {}   # node -> its last report, taken again after a reload
        # one slow or hung node never delays another's calls (controller.bulkheads)
        self.executor = Bulkheads(config.agent_calls, config.agent_calls_per_node, config.agent_backfill_backlog,
                                  on_drained=lambda _node: self._lane_drained())
        self.on_fill_wanted: Callable[[], None] = lambda: None   # the server points this at the launcher
        self.stops: OrderedDict[str, Stopped] = OrderedDict()     # how recent stops went, for replies
        self._refused_at: dict[str, float] = {}
        self.intake = ReportIntake(intake_settings(config))
        self._crash_at = set(filter(None, os.environ.get("GLEANER_CRASH_AT", "").split(",")))
        self.recorder = Recorder.open(config.record_path, config.record_max_mib, clock)   # [record]: off by default
        self.recorder.started(self.ledger.settings, self.ledger.backfill, self.ledger.reserve_settings.as_dict(),
                              store.tenants(), self.ledger.tenancy_settings, self.ledger.goals_done())
        log_event(log, "pool.loaded", leases=len(self.ledger.leases), pending=len(self.ledger.requests),
                  store=str(store.path), schema_version=store.schema_version)

    def _load_ledger(self, reserve_settings: ReserveSettings, history: DemandHistory | None = None,
                     progress: Mapping[str, Any] | None = None) -> Ledger:
        """The books as the store has them (at start, and after a failed write: `history` and
        `progress`, the goals' progress book, then the old books' own, newer than the store's)."""
        store = self.store
        ledger = Ledger(ledger_settings(self.config), store.backfill(), store.reserves(), random_id,
                        store.live_leases(), store.pending_requests(), store.recently_ended(),
                        reserve_settings=reserve_settings, hints=store.hints(),
                        history=history if history is not None else store.history(),
                        reserved_nodes=store.reserved_nodes(), tenants=store.tenants(),
                        tenancy=TenancySettings(self.config.tenants_rbt, self.config.tenants_urr),
                        goals_done=store.goals_done(), on_demand_lives=store.on_demand_lives(LIFETIMES_KEPT),
                        goal_progress=progress if progress is not None else store.goal_progress())
        # the store holds what it restored; the old books' own (a reload) is saved at the next goals job
        self._progress_saved = ledger.progress.version if progress is None else -1
        ledger.explains_unfilled = True   # the log says why a node with room gets nothing (fill())
        for tenant, what, text in ledger.unreadable_settings:
            log_event(log, "tenant.settings_unreadable", logging.WARNING, tenant=tenant, setting=what, stored=text,
                      note="ignored: the tenant runs without it until it is set again")
        for key, text in store.unreadable_settings().items():
            log_event(log, "store.setting_unreadable", logging.WARNING, setting=key, stored=text,
                      note="not readable: read as none (reserved_nodes: the reserves choose afresh; goals_done: a "
                           "job done is run again; goal_progress: the goals' measured rates and task lengths start "
                           "afresh) until it is written again")
        return ledger

    # -- carrying out the ledger's effects (controller.effects) -------------------------------------

    def _apply(self, effects: list[Effect]) -> None:
        """Under the lock: commit the effects' writes in one transaction, then start the calls they
        authorise. A failed commit leaves the books as the store has them, and calls nothing."""
        try:
            fill = carry_out(effects, self)
            self.recorder.effects(effects)
        except StoreError as exc:
            self._reload(exc)
            raise
        finally:
            self._launching.clear()
        self.changed.notify_all()
        if fill:
            self.request_fill()

    def _reload(self, failure: StoreError) -> None:
        """Undo what the books took in memory for a write the store refused: they are read again
        from the store, as at a restart, and each node's last report is taken again so that the
        nodes are known at once (their unfinished business is asked again). If the store still
        refuses that, the books stay as the store has them, and the nodes come back with their
        next reports. Raises the store's error if the store cannot be read."""
        old = self._books
        log_event(log, "store.write_failed", logging.ERROR, error=str(failure),
                  effect="nothing was asked of any agent; the books are reloaded from the store")
        for replay in (True, False):
            try:
                self._books = self._load_ledger(old.reserve_settings, history=old.history,
                                                progress=old.progress.snapshot())
            except StoreError:
                self._stale = failure
                raise
            self._stale = None
            self._books.refused.update(old.refused)
            if not replay:
                break
            try:
                for report in list(self._reports.values()):
                    carry_out(self._books.report(report, self.clock()), self)
                break
            except StoreError:
                continue
            finally:
                self._launching.clear()
        self.changed.notify_all()

    @property
    def ledger(self) -> Ledger:
        """The books; after a failed write whose reload failed too, reloaded first (or StoreError)."""
        if self._stale is not None:
            self._reload(self._stale)
        return self._books

    def commit(self, writes: Sequence[Write]) -> None:
        self.store.apply_all(writes, self.clock())

    def logged(self, event: Audit) -> None:
        self._log(event)
        self.metrics.observe(event)
        self._crash_point(f"after_write:{event.kind}")

    def launch(self, launch: Launch) -> None:
        lease = launch.lease
        lane = Lane.BACKFILL if lease.role == VmRole.BACKFILL.value else Lane.URGENT
        try:
            self._launching[lease.lease_id] = self.executor.submit(lease.node_id, lane, self._launch_logged, lease)
        except NodeBusy as exc:   # its lane filled since the fill read it: a failed launch, the node backs off
            self._launching[lease.lease_id] = self.executor.submit(lease.node_id, Lane.URGENT, self._launch_refused,
                                                                   lease, str(exc))

    def resume(self, resume: Resume) -> None:
        lease = resume.lease
        try:   # a resume is a backfill VM coming back: the backfill lane, as its launch was
            self.executor.submit(lease.node_id, Lane.BACKFILL, self._resume, lease)
        except NodeBusy as exc:
            self.executor.submit(lease.node_id, Lane.URGENT, self._resume_answer, lease, False, str(exc))

    def _resume(self, lease: Lease) -> None:
        self._crash_point("before_call:resume")
        address = self._address(lease.node_id)
        try:
            if address is None:
                raise AgentCallFailed(f"node {lease.node_id} has no known agent address")
            self.agents.resume(lease.node_id, address, lease.vm_name)
            ok, detail, unknown = True, "", False
        except AgentCallFailed as exc:
            ok, detail, unknown = False, str(exc), not exc.answered
        self._crash_point("after_call:resume")
        self._resume_answer(lease, ok, detail, unknown)

    def _resume_answer(self, lease: Lease, ok: bool, detail: str, unknown: bool = False) -> None:
        with self.lock:
            self._apply(self.ledger.resume_done(lease.lease_id, ok, detail, self.clock(), unknown=unknown))

    def stop(self, stop: Stop, after: Launch | None) -> None:
        if after is None:
            self.executor.submit(stop.lease.node_id, Lane.URGENT, self._stop, stop)
        else:   # answered or not, the launch goes first (Stop.after_launch)
            self._launching[after.lease.lease_id].add_done_callback(lambda _done: self._stop_soon(stop))

    @staticmethod
    def _log(event) -> None:
        level = logging.WARNING if event.kind in ("vm.lost", "vm.conflict", "vm.unexpected", "vm.stop_failed",
                                                  "vm.resume_failed", "vm.stop_expired", "vm.launch_failed", "request.expired",
                                                  "node.suspect", "node.down") else logging.INFO
        detail = {k: v for k, v in event.detail.items() if not isinstance(v, (list, dict))}
        log_event(log, event.kind, level, node=event.node_id or "-", lease_id=event.lease_id or "-", **detail)

    def _crash_point(self, name: str) -> None:
        if name in self._crash_at:
            log_event(log, "controller.crash_point", logging.WARNING, point=name)
            logging.shutdown()
            os._exit(137)

    def _address(self, node_id: str) -> str | None:
        with self.lock:
            node = self.ledger.nodes.get(node_id)
            return node.address if node else None

    def _launch_logged(self, lease: Lease) -> None:
        with self.lock:   # queued behind a slow node, it may have ended meanwhile: then nothing to ask
            current = self.ledger.leases.get(lease.lease_id)
        if current is None or current.state not in ("starting", "cancelling"):
            log_event(log, "vm.launch_skipped", lease_id=lease.lease_id, node=lease.node_id,
                      state=current.state if current else "ended", reason="it ended while its launch waited")
            return
        try:
            self._launch(lease)
        except Exception as exc:   # the victims chained to it are still asked to stop; say why it broke
            log_event(log, "vm.launch_error", logging.ERROR, lease_id=lease.lease_id, error=repr(exc))

    def _lane_drained(self) -> None:
        """A node's backfill lane has room again: the launcher may plan there."""
        with self.lock:
            self.request_fill()

    def _launch_refused(self, lease: Lease, detail: str) -> None:
        with self.lock:
            self.recorder.launch_answer(lease, False, detail)
            self._apply(self.ledger.launch_done(lease.lease_id, False, detail, self.clock()))

    def _stop_soon(self, stop: Stop) -> None:
        try:
            self.executor.submit(stop.lease.node_id, Lane.URGENT, self._stop, stop)
        except RuntimeError:   # shutting down: ask here rather than not at all
            self._stop(stop)

    def _launch(self, lease: Lease) -> None:
        self._crash_point("before_call:launch")
        address = self._address(lease.node_id)
        try:
            if address is None:
                raise AgentCallFailed(f"node {lease.node_id} has no known agent address")
            # a backfill guest is told when it will be recycled, so it can leave work it could not finish
            retire = self.ledger.backfill.duration_seconds if lease.role == VmRole.BACKFILL.value else 0
            # a goal's dedicated VM runs its tenant's job: its guest says the job's progress as a
            # volunteer's does (backfill VMs always have the work channel; on-demand VMs never)
            self.agents.launch(lease.node_id, address, lease.vm_name, VmRole(lease.role), lease.vcpus,
                               lease.memory_mib, lease.image, lease.lease_id, retire_after_seconds=retire,
                               work_channel=is_dedicated(lease))
            ok, detail = True, ""
        except AgentCallFailed as exc:
            ok, detail = False, str(exc)
        self._crash_point("after_call:launch")
        with self.lock:
            self.recorder.launch_answer(lease, ok, detail)
            self._apply(self.ledger.launch_done(lease.lease_id, ok, detail, self.clock()))

    def _stop(self, effect: Stop) -> None:
        lease = effect.lease
        self._crash_point("before_call:stop")
        address = self._address(lease.node_id)
        try:
            if address is None:
                raise AgentCallFailed(f"node {lease.node_id} has no known agent address")
            if effect.hibernate:
                stopped = self.agents.hibernate(lease.node_id, address, lease.vm_name)
            else:
                stopped = self.agents.terminate(lease.node_id, address, lease.vm_name, effect.grace_seconds,
                                                effect.force)
            ok = True
        except AgentCallFailed as exc:   # a save the agent refused terminates the victim; one unknown is asked again
            outcome = REFUSED if effect.hibernate and exc.answered else UNREACHABLE
            stopped, ok = Stopped(outcome, 0.0, str(exc)), False
        self._crash_point("after_call:stop")
        with self.lock:
            self.recorder.stop_answer(lease, ok, stopped.outcome, stopped.seconds, stopped.detail)
            self.stops[lease.lease_id] = stopped
            while len(self.stops) > 10_000:
                self.stops.popitem(last=False)
            self._apply(self.ledger.stop_done(lease.lease_id, stopped.outcome, ok, stopped.seconds, stopped.detail,
                                              self.clock()))

    # -- on-demand requests -----------------------------------------------------------------------

    def request(self, vcpus: int, memory_mib: int, image: str, owner: str, request_id: str,
                wait_seconds: float | None = None) -> RequestResult:
        """Place an on-demand VM and wait (at most wait_seconds) until it runs, failed, or was
        rejected; the same request_id again gives the same request's answer."""
        started = time.monotonic()
        owner = self._request_owner(owner)
        checks.request(vcpus, memory_mib, image, owner, request_id)
        wait = self.request_wait() if wait_seconds is None else wait_seconds
        booked_ms = None
        with self.lock:
            held_since = time.perf_counter()
            record = self.ledger.pending(request_id) or self.store.request(request_id)
            if record is not None:   # an id already used: its answer only for its own tenant
                self._check_tenant(f"request {request_id!r}", owner=record.owner)
            if record is None:
                # The record keeps the decision's time; the reply gives the whole booking: from
                # taking the lock, through the decision, to the commit of its rows and audit events.
                self.recorder.request(vcpus, memory_mib, image, owner, request_id)
                self._apply(self.ledger.request(Ask(vcpus, memory_mib, image, owner, request_id), self.clock(),
                                                time.perf_counter))
                booked_ms = (time.perf_counter() - held_since) * 1000
                record = self.ledger.pending(request_id)
            elif (record.vcpus, record.memory_mib, record.image, record.owner) != (vcpus, memory_mib, image, owner):
                raise InvalidField("request_id", f"{request_id!r} was already used for a request of {record.vcpus} "
                                                 f"vCPUs, {record.memory_mib} MiB, image {record.image!r}, owner "
                                                 f"{record.owner!r}; use a new request_id")
            while record.outcome == "pending" and time.monotonic() - started < wait:
                self.changed.wait(timeout=min(1.0, wait - (time.monotonic() - started)))
                record = self.ledger.pending(request_id) or self.store.request(request_id) or record
            return replace(self._result(record, time.monotonic() - started), booked_ms=booked_ms)

    def cancel(self, request_id: str) -> RequestResult:
        """Withdraw a request still waiting for room; one already answered is returned as it is."""
        ids.request_id(request_id)
        with self.lock:
            record = self.ledger.pending(request_id) or self.store.request(request_id)
            if record is None:
                raise RequestNotFound(f"no request {request_id!r}")
            self._check_tenant(f"request {request_id!r}", owner=record.owner)
            if record.lease_id and record.outcome in ("pending", "placed"):
                raise AlreadyPlaced(f"request {request_id!r} is placed already, on lease {record.lease_id} "
                                    f"(node {record.node_id}): release the lease to stop its VM")
            self._apply(self.ledger.cancel_waiting(request_id, self.clock()))
            record = self.ledger.pending(request_id) or self.store.request(request_id) or record
            return self._result(record, 0.0)

    def request_wait(self) -> float:
        """Long enough for the slowest path: the wait for room (the wait window, or backfill VMs
        starting or stopping: a launch, or a grace and a stop), the victims' grace, then the launch
        (the caller's own deadline still caps it: a request still waiting answers pending)."""
        s, grace = self.ledger.settings, self.ledger.backfill.grace_seconds
        wait_for_room = max(self.ledger.reserve_settings.wait_seconds, s.launch_timeout, grace + s.stop_timeout)
        return wait_for_room + s.launch_timeout + grace + 15

    def _result(self, record: RequestRecord, seconds: float) -> RequestResult:
        lease = self._lease(record.lease_id) if record.lease_id else None
        preempted = []
        for victim_id in record.victims:
            victim = self._lease(victim_id)
            if victim is None:
                continue
            if not self._visible(victim):   # another tenant's VM (a backfill victim): not for a tenant-admin
                continue
            stopped = self.stops.get(victim_id) or (
                Stopped(victim.state, 0.0, "stopping") if victim.state in VICTIM else Stopped(victim.state, 0.0, ""))
            preempted.append(Preempted(victim, stopped, work(victim, record.created_at)))
        return RequestResult(record, lease, tuple(preempted), seconds, self.ledger.backfill.termination_policy.value)

    def _lease(self, lease_id: str) -> Lease | None:
        return self.ledger.leases.get(lease_id) or self.store.lease(lease_id)

    # -- a tenant-admin's calls kept to its own tenant (the rules: gleaner_common.authz) -----------

    def _request_owner(self, owner: str) -> str:
        """The owner a request is made under: a tenant-admin's tenant (authz.request_owner); and
        the VM must then be that tenant's (a tenant the pool does not have would make it default's)."""
        identity = self._tenant_admin()
        if identity is None:
            return owner
        owner = authz.request_owner(identity, owner)
        self._check_tenant(f"a VM owned by {owner!r}", owner=owner)
        return owner

    @staticmethod
    def _tenant_admin():
        """The caller if it is a tenant-admin (its calls are kept to its tenant), else None."""
        identity = current_identity()
        return identity if identity is not None and authz.tenant_scoped(identity) else None

    def _tenant_names(self) -> list[str]:
        return [t.name for t in self.store.tenants()]

    def _check_tenant(self, what: str, owner: str = "", lease: Lease | None = None, tenant: str = "") -> None:
        """authz.check_tenant for a tenant-admin caller, on `tenant`, or the tenant `lease` (else
        a request of `owner`) belongs to; other roles pass, and nothing is read for them."""
        identity = self._tenant_admin()
        if identity is None:
            return
        if not tenant:
            names = self._tenant_names()
            tenant = tenancy.tenant_of(lease, names) if lease is not None else tenancy.tenant_of_owner(owner, names)
        authz.check_tenant(identity, tenant, what)

    def _visible(self, lease: Lease, names: list[str] | None = None) -> bool:
        identity = self._tenant_admin()
        return identity is None or authz.visible(
            identity, tenancy.tenant_of(lease, self._tenant_names() if names is None else names))

    def visible_leases(self, leases: Sequence[Lease]) -> list[Lease]:
        """The leases the caller may see: all for admins and viewers, a tenant-admin's own tenant's."""
        if self._tenant_admin() is None:
            return list(leases)
        names = self._tenant_names()
        return [lease for lease in leases if self._visible(lease, names)]

    # -- release ---------------------------------------------------------------------------------

    def release_wait(self) -> float:
        """Long enough for a stop: the grace period, then the agent's timeout."""
        return self.ledger.backfill.grace_seconds + self.ledger.settings.stop_timeout

    def release(self, lease_id: str, force: bool = False, wait_seconds: float | None = None) -> tuple[Lease, Stopped]:
        """Stop a VM and end its lease; waits (at most wait_seconds, by default release_wait())
        for the stop to be confirmed, and answers with the lease as it is then."""
        ids.lease_id(lease_id)
        started = time.monotonic()
        with self.lock:
            known = self._lease(lease_id) if self._tenant_admin() else None   # only a tenant-admin's is looked at
            if known is not None:
                self._check_tenant(f"lease {lease_id!r}", lease=known)
            try:
                _lease, effects = self.ledger.release(lease_id, force, self.clock())
            except LeaseError as exc:
                if not exc.not_found:
                    raise InvalidField(exc.field, str(exc).split(": ", 1)[1]) from None
                stored = self.store.lease(lease_id)
                if stored is None:
                    raise LeaseNotFound(f"no lease {lease_id!r}") from None
                return stored, Stopped("already_ended", 0.0, f"it ended at {stored.ended_at}: {stored.end_reason}")
            self.recorder.release(_lease, force)
            self._apply(effects)
            wait = self.release_wait() if wait_seconds is None else wait_seconds
            while lease_id in self.ledger.leases and time.monotonic() - started < wait:
                self.changed.wait(timeout=min(1.0, wait - (time.monotonic() - started)))
            lease = self._lease(lease_id)
            if lease is None:   # the books had it a moment ago: only a reload from a failed store loses it
                raise LeaseNotFound(f"lease {lease_id!r} is no longer in the books or the store")
            stopped = self.stops.get(lease_id) or Stopped(lease.state, 0.0, "")
        return lease, stopped

    # -- reports, time, backfill ------------------------------------------------------------------

    def ingest(self, report) -> None:
        self.metrics.report("applied")
        with self.lock:
            self._reports[report.node_id] = report   # what a reload takes again (one per node)
            self.recorder.report(report)
            try:
                effects = self.ledger.report(report, self.clock())
                if effects:
                    self.recorder.report_acted(report.node_id)   # a repeated report that did something
                self._apply(effects)
            except LeaseConflict as exc:   # an adoption clashed: the books were reloaded without it
                for lease in exc.leases:
                    self._apply(self.ledger.adoption_refused(lease, str(exc), self.clock()))
                self._apply(self.ledger.report(report, self.clock()))

    def open_report_stream(self, node_id: str) -> ReportStream:
        """A report stream of `node_id`, within its budget (ReportRefused while it sits out a penalty)."""
        return self.intake.open_stream(node_id, time.monotonic())

    def report_over_budget(self, node_id: str) -> None:
        """A report dropped over its node's budget: logged at most once a minute per node, with the count."""
        self.metrics.report("over_budget")
        dropped = self.intake.due_to_say(node_id, time.monotonic())
        if dropped:
            log_event(log, "report.over_budget", logging.WARNING, node=node_id, dropped_total=dropped,
                      per_minute=self.intake.settings.reports_per_minute,
                      mib_per_minute=self.intake.settings.report_mib_per_minute)

    def report_refused(self, node_id: str, reason: str) -> None:
        """A report out of bounds: logged and audited, at most once per node a minute."""
        self.metrics.report("refused")
        now = time.monotonic()
        with self.lock:
            if now - self._refused_at.get(node_id, -REFUSAL_AUDIT_SECONDS) < REFUSAL_AUDIT_SECONDS:
                return
            if len(self._refused_at) > 4096:  # bounded: forget the oldest
                self._refused_at.pop(next(iter(self._refused_at)))
            self._refused_at[node_id] = now
        self.store.record("report.refused", node_id, reason=reason)
        log_event(log, "report.refused", logging.WARNING, node=node_id, reason=reason)

    def prune(self, batch: int = 500, pause_s: float = 0.05) -> dict[str, int]:
        """Retention: ended leases, resolved requests and audit events older than retention_days
        deleted, `batch` rows of each a transaction, outside the pool lock (the store's own lock
        is held one small transaction at a time, so requests and reports go on in between)."""
        before = self.clock() - self.config.retention_days * 86400
        totals = {table: 0 for table, *_ in Store.PRUNED}
        while True:
            deleted = self.store.prune_batch(before, batch)
            for table, count in deleted.items():
                totals[table] += count
            if not any(deleted.values()):
                break
            time.sleep(pause_s)
        if any(totals.values()):
            log_event(log, "store.pruned", retention_days=self.config.retention_days, **totals)
        return totals

    def tick(self) -> None:
        """Liveness, deadlines and retries: the ledger's clock."""
        with self.lock:
            effects = self.ledger.tick(self.clock())
            self._apply(effects)
            self.recorder.job("tick", effects)

    def request_fill(self) -> None:
        if fill_wanted(self.ledger.backfill.enabled, len(self.ledger.waiting)):   # freed room to waiting requests first
            self.on_fill_wanted()

    def fill(self) -> int:
        """Book backfill VMs on idle capacity and recycle old ones; returns how many were launched."""
        with self.lock:
            ledger = self.ledger
            effects = ledger.fill(self.clock(), self.executor.lane_room())
            self._apply(effects)
            self.recorder.job("fill", effects)
            notes, ledger.fill_notes = ledger.fill_notes, []
        for answer in notes:   # a node with room that the launcher leaves empty, once per reason
            log_event(log, "backfill.not_filling", node=answer.node_id, reason_code=answer.code, reason=answer.first)
        launched = sum(isinstance(e, Launch) for e in effects)
        if launched:
            log_event(log, "backfill.launching", count=launched)
        return launched

    def size_goals(self) -> None:
        """Size the goal-driven batch tenants (the scheduler's goals job, every GOAL_INTERVAL_S)."""
        with self.lock:
            effects = self.ledger.size_goals(self.clock())
            self._apply(effects)
            if self.ledger.tenant_goals or effects:   # a sizing that changed nothing still steers the next
                self.recorder.job("goals", effects)
            self._save_goal_progress()

    def _save_goal_progress(self) -> None:
        """Under the lock: the progress book's snapshot, if it changed since the last save (a goals
        job a minute: a restart loses at most that much of the histories)."""
        progress = self.ledger.progress
        if progress.version != self._progress_saved:
            self.store.set_goal_progress(progress.snapshot())
            self._progress_saved = progress.version

    def select(self, evaluation: bool) -> None:
        with self.lock:
            effects = self.ledger.select(self.clock(), evaluation)
            self._apply(effects)
            self.recorder.job("select", effects)

    def set_backfill(self, config: BackfillConfig) -> None:
        with self.lock:
            self.store.set_backfill(config)
            self.ledger.backfill = config
            self.recorder.backfill(config)
        self.store.record("backfill.configured", **config.as_dict())

    def _reserve_settings_at_start(self, from_file: ReserveSettings) -> ReserveSettings:
        """The config file's [reserves] when it changed since the last start (or at the first),
        else the settings in force at the last stop: a gleanctl change holds across restarts
        until the file itself is edited. Written, and audited if they change, before use."""
        in_force, last_file = self.store.reserve_settings()
        file_now = from_file.as_dict()
        settings, source = from_file, "config file"
        if in_force is not None and last_file == file_now:
            try:
                settings, source = ReserveSettings.from_dict(in_force), "kept from the last run"
            except ReserveError as exc:   # written by another version: the file's, and say so
                log_event(log, "reserve.settings_unreadable", logging.WARNING, error=str(exc))
        elif in_force is not None and last_file is not None:
            # keys set with gleanctl (not the file's then) that the file now undoes
            dropped = sorted(k for k, v in in_force.items() if last_file.get(k, v) != v and file_now.get(k, v) != v)
            if dropped:   # set with gleanctl, then the file was edited: the file wins, say what went
                log_event(log, "reserve.settings_overridden", logging.WARNING, keys=",".join(dropped),
                          reason="the config file's [reserves] was edited since the last start")
        self.store.set_reserve_settings(settings.as_dict(), source, from_file=file_now)
        log_event(log, "reserve.settings", source=source, **settings.as_dict())
        return settings

    def _warn_if_lead_short(self) -> None:
        warning = lead_warning(self.ledger.reserve_settings, self.ledger.backfill.retry_seconds,
                               self.ledger.backfill.grace_seconds, self.ledger.settings.stop_timeout)
        if warning:
            log_event(log, "reserve.lead_short", logging.WARNING, reason=warning)

    def set_reserve_settings(self, changes: Mapping[str, Any]) -> ReserveSettings:
        """Change some [reserves] settings now (checked: InvalidField names the field); written
        and audited before the ledger uses them, and the next fill applies them."""
        with self.lock:
            before = self.ledger.reserve_settings
            settings = checks.reserve_settings(before, changes)
            slots_moved = (settings.slot_seconds, settings.utc_offset_seconds) != \
                (before.slot_seconds, before.utc_offset_seconds)
            who = current_identity()
            note = dict(history_reset=True) if slots_moved else {}
            self.store.set_reserve_settings(settings.as_dict(), f"gleanctl ({who or 'local'})", note=note)
            if slots_moved:
                log_event(log, "reserve.history_reset", logging.WARNING,
                          reason="slot_seconds or utc_offset_seconds changed: the predictive reserve's history "
                                 "was kept in the old slots and starts afresh")
            self.ledger.set_reserve_settings(settings)
            self._warn_if_lead_short()
        self.request_fill()
        return settings

    def set_reserve(self, reserve: Reserve) -> None:
        """Set (or, all zero, remove) a reserve; every node's view is rebuilt with it."""
        with self.lock:
            self.store.set_reserve(reserve)
            self.ledger.set_reserves(self.store.reserves())
        self.store.record("reserve.set", reserve.node_id, vcpus=reserve.vcpus, memory_mib=reserve.memory_mib,
                          whole_node=reserve.whole_node)

    def add_hint(self, nodes: int, in_hours: float, for_hours: float, label: str) -> str:
        """An admin's hint (checked, written with its audit event); returns a warning or ''."""
        with self.lock:
            now = self.clock()
            try:
                write = self.ledger.add_hint(hint_in_hours(nodes, in_hours, for_hours, now, label), now)
            except ReserveError as exc:   # the pool or the other hints refuse it: the caller's to fix
                raise InvalidField(exc.field, str(exc).removeprefix(f"{exc.field}: ")) from None
            self._apply([write])
        self.request_fill()   # drain toward it now if it already counts
        return next((e.detail.get("note", "") for e in write.events), "")

    def cancel_hints(self, label: str) -> int:
        """Drop the live hints with this label (every one when empty); returns how many."""
        with self.lock:
            write = self.ledger.cancel_hints(label, self.clock())
            self._apply([write])
        self.request_fill()
        return next((e.detail["dropped"] for e in write.events), 0)

    def save_history(self) -> None:
        """Keep the predictive reserve's history across restarts (run periodically, and at a clean
        stop, with the goals' progress)."""
        with self.lock:
            self.store.set_history(self.ledger.history)
            self._save_goal_progress()

    def reserve_status(self) -> tuple[ReserveSettings, ReserveTarget, list[Hint], list[str], int]:
        """(settings, the target now, live hints, nodes kept free at the last fill, waiting requests)."""
        with self.lock:
            now = self.clock()
            ledger = self.ledger
            return (ledger.reserve_settings, ledger.reserve_target(now), list(live_hints(ledger.hints, now)),
                    sorted(ledger.reserved_nodes), len(ledger.waiting))

    # -- reading ---------------------------------------------------------------------------------

    @property
    def backfill(self) -> BackfillConfig:
        return self.ledger.backfill

    @property
    def reserves(self) -> dict[str, Reserve]:
        return self.ledger.reserves

    @property
    def selected(self) -> tuple[str, ...]:
        return self.ledger.selected

    @property
    def productivity(self) -> Mapping[str, float]:
        return self.ledger.productivity

    @property
    def predicted(self) -> Mapping[str, float]:
        return self.ledger.predicted

    def node_rows(self) -> list[tuple[NodeState, NodeView, int, int]]:
        """(node, its view, on-demand VMs, backfill VMs) for every node, by id."""
        with self.lock:
            rows = []
            for node_id, node in sorted(self.ledger.nodes.items()):
                roles = [l.role for l in self.ledger.by_node.get(node_id, {}).values()]
                rows.append((replace(node), self.ledger.view(node_id), roles.count("on_demand"),
                             roles.count("backfill")))
            return rows

    def pool_figures(self) -> PoolFigures:
        """What the metrics' gauges read, in one pass under the books' lock."""
        with self.lock:
            ledger = self.ledger
            nodes: dict[str, int] = {}
            states: dict[str, str] = {}
            capacity, memory, on_demand, host_other, backfill = 0, 0, 0.0, 0.0, 0.0
            for node in ledger.nodes.values():
                nodes[node.state] = nodes.get(node.state, 0) + 1
                states[node.node_id] = node.state
                if node.state == "up":
                    capacity, memory = capacity + node.capacity.vcpus, memory + node.capacity.memory_mib
                    on_demand += node.on_demand_cpu
                    host_other += max(node.foreground_cpu - node.on_demand_cpu, 0.0)
                    backfill += node.backfill_cpu
            leases: dict[tuple[str, str], int] = {}
            vcpus: dict[str, int] = {}
            mib: dict[str, int] = {}
            held: dict[str, Size] = {t.name: ZERO for t in ledger.tenants}
            for lease in ledger.live_leases():
                leases[(lease.role, lease.state)] = leases.get((lease.role, lease.state), 0) + 1
                tenant = ledger.tenant_of_lease(lease)
                held[tenant] = held.get(tenant, ZERO) + lease.held
                if states.get(lease.node_id) == "up":   # as the capacity: a node down holds nothing one can use
                    vcpus[lease.role] = vcpus.get(lease.role, 0) + lease.held.vcpus
                    mib[lease.role] = mib.get(lease.role, 0) + lease.held.memory_mib
            return PoolFigures(nodes=nodes, node_states=states, leases=leases, allocated_vcpus=vcpus, allocated_memory_mib=mib,
                               capacity_vcpus=capacity, capacity_memory_mib=memory,
                               foreground_cpu_cores=dict(on_demand=on_demand, host_other=host_other),
                               backfill_cpu_cores=backfill, reserved_nodes=len(ledger.reserved_nodes),
                               waiting_requests=len(ledger.waiting), selected_nodes=len(ledger.selected),
                               backfill_enabled=ledger.backfill.enabled,
                               tenants={t.name: (held.get(t.name, ZERO), t.lower, None if t.upper == UNBOUNDED else t.upper)
                                        for t in ledger.tenants})

    def explain(self) -> dict[str, FillAnswer]:
        """Why backfill fills each node or not."""
        with self.lock:
            return self.ledger.explain(self.clock())

    def live_leases(self) -> list[Lease]:
        with self.lock:
            return self.ledger.live_leases()

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.recorder.close()

    # -- tenants (issue 26: stored, audited and admitted here; the rule is controller/tenants.py) ----

    def tenant_capacity(self) -> Size:
        """The capacity of the nodes not down, which admission books against and the bounds are
        honoured in (controller.core.bounds)."""
        with self.lock:
            return self.ledger.tenant_capacity()

    def tenant_rows(self, name: str = "") -> list[tuple[TenantRecord, Size, list[str]]]:
        """(tenant, what its live VMs hold, their lease ids) for every tenant, or `name`'s only."""
        if name:
            tenancy.name(name)
            self._check_tenant(f"tenant {name!r}", tenant=name)
        with self.lock:
            records = self.store.tenants()
            used = tenancy.usage(self.ledger.live_leases(), [t.name for t in records])
        caller = self._tenant_admin()   # a tenant-admin reads its own tenant only
        records = [t for t in records if caller is None or authz.visible(caller, t.name)]
        rows = [(t, *used[t.name]) for t in records if not name or t.name == name]
        if name and not rows:
            raise tenancy.TenantNotFound(f"no tenant {name!r} (known: {', '.join(t.name for t in records)})")
        return rows

    def create_tenant(self, name: str, kind: str, lower: Size, upper: Size) -> TenantRecord:
        """A new tenant, checked and admitted (TenantRefused names both conditions' figures), then
        stored with its tenant.created event in one transaction; refused, nothing is written."""
        with self.lock:
            record = tenancy.created(name, kind, lower, upper, self.clock())
            existing = self.store.tenants()
            if any(t.name == name for t in existing):
                raise tenancy.TenantExists(f"tenant {name!r} exists already; `gleanctl tenant set {name}` changes "
                                           "its bounds")
            self._admit(existing, record)
            self.store.put_tenant(record, Audit("tenant.created", detail=_tenant_detail(record)), new=True,
                                  at=self.clock())
            self._tenants_changed()
        log_event(log, "tenant.created", **_tenant_detail(record))
        self.request_fill()   # the launcher grants by the tenants now
        return record

    def set_tenant(self, name: str, changes: Mapping[str, int]) -> TenantRecord:
        """Change some of a tenant's bound figures (tenancy.BOUND_FIELDS; the others keep theirs).
        A change that takes nothing more (neither bound grows in what admission counts) is
        always allowed, so a pool that lost nodes can be brought back within its bounds; any
        other is admitted as a new tenant would be."""
        tenancy.name(name)
        with self.lock:
            existing = self.store.tenants()
            old = next((t for t in existing if t.name == name), None)
            if old is None:
                raise tenancy.TenantNotFound(f"no tenant {name!r} (known: {', '.join(t.name for t in existing)})")
            new = replace(old, **{f: int(changes[f]) for f in tenancy.BOUND_FIELDS if f in changes})
            tenancy.bounds(name, new.lower, new.upper)
            if not tenancy.takes_nothing_more(old, new):
                self._admit([t for t in existing if t.name != name], new)
            detail = dict(_tenant_detail(new), before_lower=f"{old.lower_vcpus},{old.lower_memory_mib}",
                          before_upper=f"{old.upper_vcpus},{old.upper_memory_mib}")
            self.store.put_tenant(new, Audit("tenant.changed", detail=detail), new=False, at=self.clock())
            self._tenants_changed(sized=True)   # bounds steer the sizing
        log_event(log, "tenant.changed", **detail)
        self.request_fill()   # the launcher grants by the tenants now
        return new

    def set_tenant_goal(self, name: str, goal: Mapping[str, Any] | None) -> TenantRecord:
        """A batch tenant's goal (goal_sizing.goal_from_dict checks it: InvalidField names the
        figure), or none; stored with a tenant.changed event, then sized at once."""
        self._check_tenant("change the goal of", tenant=name)
        if goal is not None:
            goal_from_dict(goal)
            if name == BACKFILL_TENANT:   # its dedicated VMs would be on-demand VMs of owner "backfill": default's
                raise tenancy.TenantRefused(f"tenant {name!r} is the built-in batch tenant and takes no goal: create "
                                            "a batch tenant for goal-driven work (gleanctl tenant create NAME --kind batch)")
        value = json.dumps(dict(goal), sort_keys=True) if goal is not None else None
        return self._change_batch_tenant(name, "goal", lambda _old: value, unset="none", job_begins=True)

    def _batch_tenant(self, name: str) -> TenantRecord:
        """The stored batch tenant `name` (TenantNotFound, or TenantRefused for an on-demand one)."""
        existing = self.store.tenants()
        found = next((t for t in existing if t.name == name), None)
        if found is None:
            raise tenancy.TenantNotFound(f"no tenant {name!r} (known: {', '.join(t.name for t in existing)})")
        if found.kind != "batch":
            raise tenancy.TenantRefused(f"tenant {name!r} is on-demand: only batch tenants run backfill and goals")
        return found

    def set_tenant_backfill(self, name: str, changes: Mapping[str, Any], reset: bool) -> TenantRecord:
        """A batch tenant's own backfill settings (batch_fill.TENANT_BACKFILL_KEYS): `changes` over
        its current ones (none after `reset`), each checked against the pool-wide settings' bounds;
        stored with a tenant.changed event, then the launcher grants by them."""
        self._check_tenant("change the backfill settings of", tenant=name)

        def merged(old: TenantRecord) -> str | None:
            own = {} if reset else json.loads(old.backfill or "{}")
            own.update(changes)
            checks.backfill(self.ledger.backfill, own)   # InvalidField names a key out of bounds
            return json.dumps(own, sort_keys=True) if own else None
        return self._change_batch_tenant(name, "backfill", merged, unset="pool-wide")

    def _change_batch_tenant(self, name: str, field: str, value: Callable[[TenantRecord], str | None],
                             unset: str, job_begins: bool = False) -> TenantRecord:
        """Batch tenant `name` with its JSON `field` (goal or backfill) set to `value(old)`, which
        runs under the lock and may refuse. Stored with a tenant.changed event naming the field
        before and after (`unset` standing for none) before the books are told: a change is
        durable before the grants it allows. The goals are sized at once (the goals job would
        wait up to a minute); `job_begins` (a goal set) starts its tenant's job afresh."""
        with self.lock:
            old = self._batch_tenant(name)
            new = replace(old, **{field: value(old)})
            detail = dict(_tenant_detail(new), **{field: getattr(new, field) or unset,
                                                  f"before_{field}": getattr(old, field) or unset})
            self.store.put_tenant(new, Audit("tenant.changed", detail=detail), new=False, at=self.clock(),
                                  job_begins=job_begins,
                                  goal_progress=self.ledger.progress_kept(goal_begins=name) if job_begins else None)
            self._tenants_changed(goal_begins=name if job_begins else None, sized=True)
        log_event(log, "tenant.changed", **detail)
        self.request_fill()   # the launcher grants by the tenants now
        return new

    def delete_tenant(self, name: str, drain: bool, wait_seconds: float | None = None
                      ) -> tuple[TenantRecord, list[str]]:
        """Delete a tenant; refused (TenantRefused, naming them) while it has live VMs, unless
        `drain`: they are released first, and the tenant deleted once they have ended (within
        the wait, else refused naming those still stopping; it is kept)."""
        started = time.monotonic()
        record = self.tenant_rows(name)[0][0]   # TenantNotFound
        if name in BUILT_IN_TENANTS:
            raise tenancy.TenantRefused(f"tenant {name!r} is built in and cannot be deleted (its bounds may be set)")
        with self.lock:
            leases = self.tenant_rows(name)[0][2]
            if leases and not drain:
                raise tenancy.TenantRefused(f"tenant {name!r} has {len(leases)} live VM(s): {', '.join(leases)}; "
                                            f"release them, or delete it with --drain to release them first")
            self.ledger.draining.add(name)   # while it drains, the launcher grants it nothing more
            self.recorder.drain(name, True)
            try:
                for lease_id in leases:
                    try:
                        released, effects = self.ledger.release(lease_id, False, self.clock())
                    except LeaseError:   # ended meanwhile, or already stopping: waited for below
                        continue
                    self.recorder.release(released, False)
                    self._apply(effects)
                wait = self.release_wait() if wait_seconds is None else wait_seconds
                while self.tenant_rows(name)[0][2] and time.monotonic() - started < wait:
                    self.changed.wait(timeout=max(0.01, min(1.0, wait - (time.monotonic() - started))))
                left = self.tenant_rows(name)[0][2]
                if left:
                    raise tenancy.TenantRefused(f"tenant {name!r} still has live VM(s) after {wait:.0f}s: "
                                                f"{', '.join(left)}; it is kept: run the delete again once they "
                                                "have stopped")
            finally:
                self.ledger.draining.discard(name)
                self.recorder.drain(name, False)
            detail = dict(_tenant_detail(record), drained=",".join(leases))
            self.store.delete_tenant(name, Audit("tenant.deleted", detail=detail), at=self.clock(),
                                     goal_progress=self.ledger.progress_kept(deleted=name))
            self._tenants_changed()   # its progress is forgotten with it (Bounds.set_tenants)
        log_event(log, "tenant.deleted", **detail)
        self.request_fill()   # the launcher grants by the tenants now
        return record, leases

    def _tenants_changed(self, goal_begins: str | None = None, sized: bool = False) -> None:
        """Under the lock, the store's tenants just written: the books take them (and a job begins
        for `goal_begins`, whose goal was set), the recording notes them, and with `sized` the
        goals are sized at once (a batch tenant changed: the goals job would wait up to a minute)."""
        records = self.store.tenants()
        effects = self.ledger.tenants_changed(records, goal_begins, sized, self.clock())
        self.recorder.tenants(records, goal_begins, sized)
        self._apply(effects)

    def tenant_summary(self) -> tuple[dict[str, int], Size, float]:
        """(tenants per kind, the sum of the bounded upper bounds, RBT) for `gleanctl status`."""
        records = self.store.tenants()
        kinds = {k: sum(t.kind == k for t in records) for k in TENANT_KINDS}
        return kinds, sum((t.upper for t in records if not t.unbounded), ZERO), self.config.tenants_rbt

    def _admit(self, others: list[TenantRecord], new: TenantRecord) -> None:
        """TenantRefused unless PhoenixCloud's two conditions hold (tenancy.admission_problem)."""
        capacity = self.tenant_capacity()
        used = tenancy.usage(self.ledger.live_leases(), [t.name for t in others] + [new.name])
        idle = tenancy.idle_for(others, used, capacity)
        problem = tenancy.admission_problem(others, new, capacity, idle, self.config.tenants_rbt,
                                            self.config.tenants_urr)
        if problem:
            log_event(log, "tenant.refused", logging.WARNING, tenant=new.name, reason=problem)
            raise tenancy.TenantRefused(problem)


def _tenant_detail(tenant: TenantRecord) -> dict[str, Any]:
    """A tenant's audit detail: its name, kind and bounds as CPUS,MIB."""
    return dict(tenant=tenant.name, kind=tenant.kind, lower=f"{tenant.lower_vcpus},{tenant.lower_memory_mib}",
                upper=f"{tenant.upper_vcpus},{tenant.upper_memory_mib}")
