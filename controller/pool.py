"""The controller's pool: what it knows of nodes and leases, and the flows that change them.

Decisions come from the pure functions in policy and selection; this module gathers their
input (a snapshot kept up to date incrementally, so a decision over 10,000 nodes does not rebuild
it), applies their answers through the agents, and records every step in the store. One lock
guards the books; agent calls happen outside it, with the capacity they need already booked, so
concurrent requests never double-book a node.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import numpy as np

from gleaner_common import ids
from gleaner_common.ids import InvalidField
from gleaner_common.logs import log_event

from . import checks
from .agents import AgentCallFailed, AgentLinks, Stopped
from .config import ControllerConfig
from .core.policy import (BackfillConfig, NodeView, Policy, Pool, Preempt, Reject, Size, VmRole, VmView,
                     place_on_demand, plan_backfill)
from .core.selection import moving_average, potential_productivity, select_volunteers
from .store import Lease, LeaseConflict, RequestRecord, Reserve, Store

log = logging.getLogger(__name__)
# Lease states that hold capacity on their node. A "preempting" VM is still shutting down, but
# its room is already booked for the on-demand lease it makes way for, so it is not counted twice.
COUNTED_STATES = ("starting", "running", "stopping")
STOPPABLE_STATES = COUNTED_STATES + ("preempting",)
LOST_AFTER_SECONDS = 10.0   # a running lease absent from reports for this long after launch is lost
TOMBSTONE_SECONDS = 60.0    # reports may still show a VM this long after it ended
REFUSAL_AUDIT_SECONDS = 60.0  # one report.refused audit event per node this often, however many come


class LeaseNotFound(LookupError):
    pass


@dataclass
class NodeState:
    node_id: str
    address: str
    capacity: Size
    state: str = "up"                     # up | suspect | down
    last_report: float = 0.0              # monotonic
    fg_samples: deque = field(default_factory=deque)
    foreground_cpu: float = 0.0
    backfill_cpu: float = 0.0
    signature: tuple = ()
    seen_version: int = -1
    check_until: float = 0.0
    agent_version: str = ""
    images: frozenset[str] = frozenset()   # what the agent can boot
    min_memory_mib: int = 0                # the smallest VM the agent launches


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


class _VmsByNode(Mapping):
    """The pool's VMs per node, as the policies read them, without copying them per decision."""

    def __init__(self, views: dict[str, list[VmView]]) -> None:
        self._views = views

    def __getitem__(self, node_id: str) -> Sequence[VmView]:
        return self._views[node_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._views)

    def __len__(self) -> int:
        return len(self._views)


class PoolManager:
    def __init__(self, config: ControllerConfig, store: Store, agents: AgentLinks) -> None:
        self.config = config
        self.store = store
        self.agents = agents
        self.lock = threading.RLock()
        self.nodes: dict[str, NodeState] = {}
        self.leases: dict[str, Lease] = {}
        self.by_node: dict[str, dict[str, Lease]] = {}
        self.lease_version: dict[str, int] = {}
        self._node_views: dict[str, NodeView] = {}
        self._vm_views: dict[str, list[VmView]] = {}
        self._dirty: set[str] = set()
        self.selected: tuple[str, ...] = ()
        self.productivity: dict[str, float] = {}
        self.predicted: dict[str, float] = {}
        self.churn = 0
        self._tombstones: dict[str, float] = {}        # vm name -> when its lease ended (monotonic)
        self._unexpected: set[str] = set()    # VMs already reported as unexpected or conflicting
        self._refused_at: dict[str, float] = {}   # node -> when its last refused report was audited
        self._inflight: dict[str, threading.Event] = {}
        self._fill_lock = threading.Lock()
        self._fill_again = threading.Event()
        self._started = time.monotonic()
        self.executor = ThreadPoolExecutor(max_workers=16, thread_name_prefix="agent-call")
        self.on_fill_wanted = lambda: None                 # the server points this at the launcher
        # Settings read on every decision and view refresh: kept here, written through to the store.
        self.backfill: BackfillConfig = store.backfill()
        self.reserves: dict[str, Reserve] = store.reserves()
        for lease in store.live_leases():
            self._book(lease)
        log_event(log, "pool.loaded", leases=len(self.leases), store=str(store.path),
                  schema_version=store.schema_version)

    # -- the books ------------------------------------------------------------------------------

    def _book(self, lease: Lease) -> None:
        """Keep a live lease in memory (or drop an ended one) and mark its node's view stale."""
        old = self.leases.pop(lease.lease_id, None)
        if old is not None:
            self.by_node.get(old.node_id, {}).pop(lease.lease_id, None)
            self._touch(old.node_id)
        if lease.ended_at is None:
            self.leases[lease.lease_id] = lease
            self.by_node.setdefault(lease.node_id, {})[lease.lease_id] = lease
        else:
            self._tombstones[lease.vm_name] = time.monotonic()
        self._touch(lease.node_id)

    def _touch(self, node_id: str) -> None:
        self._dirty.add(node_id)
        self.lease_version[node_id] = self.lease_version.get(node_id, 0) + 1

    def _save(self, lease: Lease) -> Lease:
        self.store.put_lease(lease)
        self._book(lease)
        return lease

    def _reserve_for(self, node_id: str, reserves: dict[str, Reserve]) -> Reserve:
        return reserves.get(node_id) or reserves.get("*") or Reserve(node_id)

    def _refresh_views(self) -> None:
        if not self._dirty:
            return
        reserves = self.reserves
        for node_id in self._dirty:
            node = self.nodes.get(node_id)
            if node is None:
                self._node_views.pop(node_id, None)
                self._vm_views.pop(node_id, None)
                continue
            vms = [VmView(l.lease_id, node_id, VmRole(l.role), Size(l.vcpus, l.memory_mib),
                          l.launched_at or l.created_at, preemptible=l.role == "backfill" and l.state == "running")
                   for l in self.by_node.get(node_id, {}).values() if l.state in COUNTED_STATES]
            reserve = self._reserve_for(node_id, reserves)
            total, pinned, newest = Size(0, 0), Size(0, 0), None
            for vm in vms:
                total += vm.size
                if not vm.preemptible:
                    pinned += vm.size
                elif newest is None or vm.launched_at > newest:
                    newest = vm.launched_at
            self._vm_views[node_id] = vms
            self._node_views[node_id] = NodeView(node_id, node.capacity, node.state == "up",
                                                 Size(reserve.vcpus, reserve.memory_mib), reserve.whole_node,
                                                 total, pinned, newest)
        self._dirty.clear()

    def set_backfill(self, config: BackfillConfig) -> None:
        with self.lock:
            self.store.set_backfill(config)
            self.backfill = config
        self.store.record("backfill.configured", **config.as_dict())

    def set_reserve(self, reserve: Reserve) -> None:
        """Set (or, all zero, remove) a reserve; every node's view is rebuilt with it."""
        with self.lock:
            self.store.set_reserve(reserve)
            self.reserves = self.store.reserves()
            self._dirty.update(self.nodes)
        self.store.record("reserve.set", reserve.node_id, vcpus=reserve.vcpus, memory_mib=reserve.memory_mib,
                          whole_node=reserve.whole_node)

    def snapshot(self, now: float | None = None) -> Pool:
        with self.lock:
            self._refresh_views()
            return Pool(tuple(self._node_views.values()), _VmsByNode(self._vm_views),
                        time.time() if now is None else now)

    def _new_lease(self, role: VmRole, node_id: str, size: Size, image: str, owner: str) -> Lease:
        lease_id = f"{'od' if role is VmRole.ON_DEMAND else 'bf'}-{uuid.uuid4().hex[:12]}"
        return Lease(lease_id=lease_id, role=role.value, node_id=node_id,
                     vm_name=f"{self.config.vm_name_prefix}{lease_id}", vcpus=size.vcpus, memory_mib=size.memory_mib,
                     image=image, owner=owner, state="starting", created_at=time.time())

    def _end(self, lease: Lease, state: str, reason: str) -> Lease:
        return self._save(replace(lease, state=state, ended_at=time.time(), end_reason=reason))

    # -- on-demand requests -----------------------------------------------------------------------

    def request(self, vcpus: int, memory_mib: int, image: str, owner: str, request_id: str) -> RequestResult:
        started = time.monotonic()
        checks.request(vcpus, memory_mib, image, owner, request_id)
        while True:
            with self.lock:
                held_since = time.perf_counter()  # decided_ms counts from here: this request holds the lock
                prior = self.store.request(request_id)
                waiting = self._inflight.get(request_id)
                if prior is not None and waiting is None:
                    return self._replay(prior, (vcpus, memory_mib, image, owner))
                if waiting is None:
                    done = self._inflight[request_id] = threading.Event()
                    plan = self._decide(vcpus, memory_mib, image, owner, request_id, held_since)
                    break
            waiting.wait()  # the same request is being served: give its answer
        try:
            return self._carry_out(plan, started)
        finally:
            with self.lock:
                self._inflight.pop(request_id, None)
            done.set()

    def _replay(self, prior: RequestRecord, asked: tuple) -> RequestResult:
        if (prior.vcpus, prior.memory_mib, prior.image, prior.owner) != asked:
            raise InvalidField("request_id", f"{prior.request_id!r} was already used for a request of "
                                             f"{prior.vcpus} vCPUs, {prior.memory_mib} MiB, image {prior.image!r}, "
                                             f"owner {prior.owner!r}; use a new request_id")
        lease = self.store.lease(prior.lease_id) if prior.lease_id else None
        return RequestResult(prior, lease)

    def _decide(self, vcpus: int, memory_mib: int, image: str, owner: str, request_id: str,
                held_since: float | None = None) -> dict:
        """Under the lock: decide, and book the new lease and the victims before anything runs.

        decided_ms is how long the request held the pool's lock for its decision: from held_since
        (perf_counter when request() took the lock, before its replay lookup; now if not given)
        through the snapshot, the placement, booking the new lease and the victims (their store
        writes) and, for a placed request, writing the pending request record. The record carries
        the figure, so the write that stores it last cannot be inside it: a rejected request's
        record and its request.rejected audit event are written after the clock stops, and so is
        a placed request's final record (outcome placed or failed, written by _carry_out outside
        the lock, with the figure that includes the pending write; the pending row itself holds
        the figure up to just before its own write). The log lines are also left out; the lock is
        released as soon as this returns.
        """
        t0 = time.perf_counter() if held_since is None else held_since
        policy = self.backfill.termination_policy
        pool = self.snapshot()
        decision = self._unbootable(pool, memory_mib, image) or \
            place_on_demand(self._able(pool, memory_mib, image), Size(vcpus, memory_mib), policy,
                            seed=hash(request_id) & 0xFFFF)
        record = RequestRecord(request_id, vcpus, memory_mib, image, owner, "pending", None, "", (), "",
                               time.time(), 0.0)
        if isinstance(decision, Reject):
            decided_ms = (time.perf_counter() - t0) * 1000
            # The clock stops here: the record and the audit event carry it, so their writes are not in it.
            record = replace(record, outcome="rejected", reason=decision.reason, decided_ms=decided_ms)
            self.store.put_request(record)
            self.store.record("request.rejected", request_id=request_id, reason=decision.reason, vcpus=vcpus,
                              memory_mib=memory_mib, decided_ms=round(decided_ms, 3))
            log_event(log, "request.rejected", request_id=request_id, reason=decision.reason)
            return {"record": record, "policy": policy}
        lease = self._save(self._new_lease(VmRole.ON_DEMAND, decision.node_id, Size(vcpus, memory_mib), image,
                                           owner))
        victims = []
        if isinstance(decision, Preempt):
            for vm_id in decision.victims:
                victims.append(self._save(replace(self.leases[vm_id], state="preempting")))
        record = replace(record, lease_id=lease.lease_id, node_id=decision.node_id,
                         victims=tuple(v.lease_id for v in victims), decided_ms=(time.perf_counter() - t0) * 1000)
        self.store.put_request(record)  # pending: this row holds the figure up to just before this write
        # The clock stops here, after the pending record's write: _carry_out stores this figure with the outcome.
        decided_ms = (time.perf_counter() - t0) * 1000
        record = replace(record, decided_ms=decided_ms)
        log_event(log, "request.placed", request_id=request_id, lease_id=lease.lease_id, node=decision.node_id,
                  victims=",".join(v.lease_id for v in victims) or "none", policy=policy.value,
                  decided_ms=round(decided_ms, 3))
        return {"record": record, "lease": lease, "victims": victims, "policy": policy, "pool_now": pool.now}

    def _able(self, pool: Pool, memory_mib: int, image: str) -> Pool:
        """The pool less the nodes that cannot boot this VM (image missing, memory below their least)."""
        able = tuple(n for n in pool.nodes if image in self.nodes[n.node_id].images
                     and memory_mib >= self.nodes[n.node_id].min_memory_mib)
        return pool if len(able) == len(pool.nodes) else Pool(able, pool.vms_by_node, pool.now)

    def _unbootable(self, pool: Pool, memory_mib: int, image: str) -> Reject | None:
        """A rejection when no up node could boot this VM at all, checked before anything is stopped."""
        up = [self.nodes[n.node_id] for n in pool.nodes if n.up]
        if not up or any(image in n.images and memory_mib >= n.min_memory_mib for n in up):
            return None
        if not any(image in n.images for n in up):
            offered = sorted(set().union(*(n.images for n in up)))
            return Reject(f"no up node has image {image!r} (they offer: {', '.join(offered[:10]) or 'none'})")
        least = min(n.min_memory_mib for n in up if image in n.images)
        return Reject(f"{memory_mib} MiB is less than the smallest VM the agents with image {image!r} "
                      f"launch ({least} MiB)")

    def _carry_out(self, plan: dict, started: float) -> RequestResult:
        record: RequestRecord = plan["record"]
        policy: Policy = plan["policy"]
        if record.outcome == "rejected":
            return RequestResult(record, None, (), time.monotonic() - started, policy.value)
        lease: Lease = plan["lease"]
        cause = f"on-demand request {record.request_id} ({record.vcpus} vCPUs, {record.memory_mib} MiB)"
        futures = [self.executor.submit(self._preempt, victim, cause, policy) for victim in plan["victims"]]
        preempted = tuple(f.result() for f in futures)
        try:
            self._launch(lease)
        except AgentCallFailed as exc:
            with self.lock:
                lease = self._end(lease, "failed", str(exc))
                record = replace(record, outcome="failed", reason=str(exc))
                self.store.put_request(record)
            self.store.record("request.failed", lease.node_id, lease.lease_id, request_id=record.request_id,
                              error=str(exc))
            log_event(log, "request.failed", logging.ERROR, request_id=record.request_id, error=str(exc))
            return RequestResult(record, lease, preempted, time.monotonic() - started, policy.value)
        total = time.monotonic() - started
        with self.lock:
            if lease.lease_id in self.leases:  # not released meanwhile
                lease = self._save(replace(self.leases[lease.lease_id], state="running", launched_at=time.time()))
            record = replace(record, outcome="placed")
            self.store.put_request(record)
        self.store.record("vm.launched", lease.node_id, lease.lease_id, role="on_demand", vm=lease.vm_name,
                          request_id=record.request_id, vcpus=lease.vcpus, memory_mib=lease.memory_mib,
                          preempted=len(preempted), seconds=round(total, 3))
        return RequestResult(record, lease, preempted, total, policy.value)

    def _preempt(self, victim: Lease, cause: str, policy: Policy) -> Preempted:
        work = max(time.time() - (victim.launched_at or victim.created_at), 0.0) * victim.vcpus
        stopped = self._stop(victim, self.backfill.grace_seconds)
        with self.lock:
            self._end(victim, "ended", f"preempted: {cause}")
        self.store.record("vm.preempted", victim.node_id, victim.lease_id, vm=victim.vm_name, cause=cause,
                          policy=policy.value, stopped=stopped.outcome, seconds=round(stopped.seconds, 3),
                          work_lost_vcpu_seconds=round(work, 1), detail=stopped.detail)
        log_event(log, "vm.preempted", lease_id=victim.lease_id, node=victim.node_id, stopped=stopped.outcome,
                  seconds=round(stopped.seconds, 3), work_lost_vcpu_s=round(work, 1))
        return Preempted(victim, stopped, work)

    def _launch(self, lease: Lease) -> None:
        """Ask the lease's node to start its VM; AgentCallFailed says why it could not."""
        address = self._address(lease.node_id)
        if address is None:
            raise AgentCallFailed(f"node {lease.node_id} has no known agent address")
        self.agents.launch(lease.node_id, address, lease.vm_name, VmRole(lease.role), lease.vcpus, lease.memory_mib, lease.image,
                           lease.lease_id)

    def _stop(self, lease: Lease, grace: int, force: bool = False) -> Stopped:
        address = self._address(lease.node_id)
        if address is None:
            return Stopped("unreachable", 0.0, f"node {lease.node_id} has no known agent address")
        try:
            return self.agents.terminate(lease.node_id, address, lease.vm_name, grace, force)
        except AgentCallFailed as exc:
            log_event(log, "vm.stop_failed", logging.ERROR, lease_id=lease.lease_id, error=str(exc))
            return Stopped("unreachable", 0.0, str(exc))

    def _address(self, node_id: str) -> str | None:
        with self.lock:
            node = self.nodes.get(node_id)
            return node.address if node else None

    # -- release ---------------------------------------------------------------------------------

    def release(self, lease_id: str, force: bool = False) -> tuple[Lease, Stopped]:
        ids.lease_id(lease_id)
        with self.lock:
            lease = self.leases.get(lease_id)
            if lease is None:
                stored = self.store.lease(lease_id)
                if stored is None:
                    raise LeaseNotFound(f"no lease {lease_id!r}")
                return stored, Stopped("already_ended", 0.0, f"it ended at {stored.ended_at}: {stored.end_reason}")
            if lease.state in ("stopping", "preempting"):
                raise InvalidField("lease_id", f"{lease_id} is already being stopped")
            lease = self._save(replace(lease, state="stopping"))
        stopped = self._stop(lease, self.backfill.grace_seconds, force)
        with self.lock:
            lease = self._end(lease, "ended", "released")
        self.store.record("vm.released", lease.node_id, lease.lease_id, vm=lease.vm_name, stopped=stopped.outcome,
                          seconds=round(stopped.seconds, 3))
        log_event(log, "vm.released", lease_id=lease_id, stopped=stopped.outcome)
        self.request_fill()
        return lease, stopped

    # -- reports and liveness ---------------------------------------------------------------------

    def ingest(self, report) -> None:
        """One agent report: node liveness and load, and its VMs against our leases."""
        now = time.monotonic()
        with self.lock:
            node = self.nodes.get(report.node_id)
            capacity = Size(report.cpus, report.memory_mib)
            if node is None:
                node = self.nodes[report.node_id] = NodeState(report.node_id, report.agent_address, capacity,
                                                              fg_samples=deque(maxlen=self.config.prediction_window))
                self._node_event("node.joined", node, address=report.agent_address, cpus=report.cpus,
                                 memory_mib=report.memory_mib)
            elif node.state != "up":
                self._node_event("node.rejoined" if node.state == "down" else "node.up", node,
                                 silent_s=round(now - node.last_report, 1))
                node.state = "up"
            if node.address != report.agent_address or node.capacity != capacity:
                node.address, node.capacity = report.agent_address, capacity
                self._touch(node.node_id)
            node.last_report = now
            node.agent_version = report.agent_version
            if node.min_memory_mib != report.min_memory_mib or len(node.images) != len(report.images) \
                    or not node.images.issuperset(report.images):
                node.images, node.min_memory_mib = frozenset(report.images), report.min_memory_mib
            node.foreground_cpu = report.foreground_cpu_cores
            node.fg_samples.append(report.foreground_cpu_cores)
            backfill_cpu, names = 0.0, []
            for vm in report.vms:  # one pass: this runs for every report of every node
                names.append(vm.name)
                if vm.role == "backfill":
                    backfill_cpu += vm.cpu_cores
            node.backfill_cpu = backfill_cpu
            signature = tuple(names)  # VM names are unique per node and carry the lease id
            version = self.lease_version.get(node.node_id, 0)
            if signature != node.signature or version != node.seen_version or now < node.check_until:
                self._match_vms(node, report.vms, now)
                node.signature, node.seen_version = signature, self.lease_version.get(node.node_id, 0)

    def report_refused(self, node_id: str, reason: str) -> None:
        """A report out of bounds: logged and audited, at most once per node a minute."""
        now = time.monotonic()
        with self.lock:
            if now - self._refused_at.get(node_id, -REFUSAL_AUDIT_SECONDS) < REFUSAL_AUDIT_SECONDS:
                return
            if len(self._refused_at) > 4096:  # bounded: forget the oldest
                self._refused_at.pop(next(iter(self._refused_at)))
            self._refused_at[node_id] = now
        self.store.record("report.refused", node_id, reason=reason)
        log_event(log, "report.refused", logging.WARNING, node=node_id, reason=reason)

    def _node_event(self, kind: str, node: NodeState, **detail) -> None:
        self.churn += 1
        self._touch(node.node_id)
        self.store.record(kind, node.node_id, **detail)
        log_event(log, kind, node=node.node_id, **detail)
        if kind in ("node.joined", "node.rejoined", "node.up"):
            self.request_fill()

    def _match_vms(self, node: NodeState, reported, now: float) -> None:
        """Reported VMs against the leases on this node: recover, adopt, or mark lost."""
        mine = {l.vm_name: l for l in self.by_node.get(node.node_id, {}).values()}
        seen = set()
        for vm in reported:
            seen.add(vm.name)
            lease = mine.get(vm.name)
            if lease is not None:
                if lease.state == "lost":
                    self._save(replace(lease, state="running"))
                    self.store.record("vm.recovered", node.node_id, lease.lease_id, vm=vm.name)
                continue
            if vm.name in self._tombstones and now - self._tombstones[vm.name] < TOMBSTONE_SECONDS:
                continue  # it ended a moment ago; the report predates that
            self._adopt_or_report(node, vm)
        young = False
        for lease in mine.values():
            if lease.vm_name in seen:
                continue
            age = time.time() - (lease.launched_at or lease.created_at)
            if lease.state == "running" and age < LOST_AFTER_SECONDS:
                young = True
            elif lease.state == "running":
                self._save(replace(lease, state="lost"))
                self.store.record("vm.lost", node.node_id, lease.lease_id, vm=lease.vm_name,
                                  reason="its agent no longer reports it")
                log_event(log, "vm.lost", logging.WARNING, lease_id=lease.lease_id, node=node.node_id)
            elif lease.state == "lost":
                self._end(lease, "ended", "lost: the node came back without it")
                self.store.record("vm.gone", node.node_id, lease.lease_id, vm=lease.vm_name)
        node.check_until = now + LOST_AFTER_SECONDS if young else 0.0

    def _adopt_or_report(self, node: NodeState, vm) -> None:
        """A VM the node runs that no lease of this node names: adopt it onto this node, unless it
        names another node's lease or an ended one (then it is reported, once, and left alone)."""
        stored = self.store.lease(vm.lease_id) if vm.lease_id else None
        if stored is not None and stored.ended_at is not None:
            self._report_once(node, vm, "vm.unexpected", f"its lease ended ({stored.end_reason}) but the agent "
                                                         "still runs it; stop it with 'gleanctl release' or by hand")
            return
        if stored is not None:  # a live lease of another node: a node never moves or takes another's lease
            self._report_once(node, vm, "vm.conflict", f"it names lease {stored.lease_id} of node {stored.node_id}; "
                                                       "not adopted, and that lease is left as it is")
            return
        role = VmRole.BACKFILL if vm.role == "backfill" else VmRole.ON_DEMAND
        lease = Lease(vm.lease_id or f"ad-{uuid.uuid4().hex[:12]}", role.value, node.node_id, vm.name, vm.vcpus,
                      vm.memory_mib, vm.image or "unknown", "adopted", "running", time.time(),
                      vm.launched_at or time.time())
        try:
            self.store.insert_lease(lease)   # a plain insert: it never replaces another lease's row
        except LeaseConflict as exc:
            self._report_once(node, vm, "vm.conflict", f"not adopted: {exc}")
            return
        self._book(lease)
        self.store.record("vm.adopted", node.node_id, lease.lease_id, vm=vm.name, role=role.value,
                          reason="a Gleaner VM the controller had no lease for")
        log_event(log, "vm.adopted", vm=vm.name, node=node.node_id, lease_id=lease.lease_id)

    def _report_once(self, node: NodeState, vm, kind: str, reason: str) -> None:
        if vm.name in self._unexpected or len(self._unexpected) > 100_000:
            return
        self._unexpected.add(vm.name)
        self.store.record(kind, node.node_id, vm.lease_id, vm=vm.name, reason=reason)
        log_event(log, kind, logging.WARNING, vm=vm.name, node=node.node_id, reason=reason)

    def check_liveness(self) -> None:
        now = time.monotonic()
        cfg = self.config
        with self.lock:
            for node in self.nodes.values():
                silent = now - node.last_report
                if node.state == "up" and silent > cfg.suspect_after_seconds:
                    node.state = "suspect"
                    self._node_event("node.suspect", node, silent_s=round(silent, 1))
                elif node.state == "suspect" and silent > cfg.down_after_seconds:
                    node.state = "down"
                    self._node_event("node.down", node, silent_s=round(silent, 1))
                    self._lose_leases(node.node_id, "its node is down")
            if now - self._started > cfg.down_after_seconds:  # leases on nodes that never reported since start
                for node_id in [n for n in self.by_node if n not in self.nodes]:
                    self._lose_leases(node_id, "its node has not reported since the controller started")
            for name in [n for n, t in self._tombstones.items() if now - t > TOMBSTONE_SECONDS]:
                del self._tombstones[name]

    def _lose_leases(self, node_id: str, reason: str) -> None:
        for lease in list(self.by_node.get(node_id, {}).values()):
            if lease.state in STOPPABLE_STATES:
                self._save(replace(lease, state="lost"))
                self.store.record("vm.lost", node_id, lease.lease_id, vm=lease.vm_name, reason=reason)

    # -- volunteer selection and the backfill launcher ----------------------------------------------

    def select(self, evaluation: bool) -> None:
        """A selection pass. At the end of an evaluation interval (evaluation=True) it decides
        afresh; between them, after a burst of node churn, the last choice stands."""
        with self.lock:
            config = self.backfill
            self._refresh_views()
            ids = [n for n, node in self.nodes.items() if node.state == "up"]
            window = self.config.prediction_window
            samples = np.full((len(ids), window), np.nan)
            for row, node_id in enumerate(ids):
                recent = list(self.nodes[node_id].fg_samples)[-window:]
                if recent:
                    samples[row, -len(recent):] = recent
            predicted = moving_average(samples, window)
            views = [self._node_views[n] for n in ids]
            cpu_max = np.array([v.capacity.vcpus for v in views], dtype=float)
            on_demand_memory = np.array([sum(vm.size.memory_mib for vm in self._vm_views[n]
                                             if vm.role is VmRole.ON_DEMAND) for n in ids], dtype=float)
            free_memory = np.array([v.capacity.memory_mib - v.reserve.memory_mib for v in views]) - on_demand_memory
            p = potential_productivity(cpu_max, predicted, free_memory, config.memory_mb)
            p[[i for i, v in enumerate(views) if v.backfill_excluded]] = 0.0
            count = len(ids) if not config.max_instances else min(len(ids), config.max_instances)
            deferred = not evaluation and self.churn > self.config.churn_burst
            result = select_volunteers(ids, p, self.selected, count, self.config.swap_threshold_cores, deferred)
            if evaluation:
                self.churn = 0
            self.selected = result.chosen
            self.productivity = dict(zip(ids, p.tolist()))
            self.predicted = dict(zip(ids, predicted.tolist()))
        for dropped, added in result.swaps:
            self.store.record("selection.swap", added, dropped=dropped, added=added,
                              threshold_cores=self.config.swap_threshold_cores)

    def request_fill(self) -> None:
        """Run the launcher soon: now, or once more right after the run in progress."""
        if self._fill_lock.locked():
            self._fill_again.set()
        elif self.backfill.enabled:
            self.on_fill_wanted()

    def fill(self) -> int:
        """Fill idle capacity with backfill VMs and recycle old ones; returns how many it launched."""
        if not self._fill_lock.acquire(blocking=False):
            self._fill_again.set()  # a fill is running: it goes round once more
            return 0
        try:
            launched = 0
            while True:
                self._fill_again.clear()
                launched += self._fill_once()
                if not self._fill_again.is_set():
                    return launched
        finally:
            self._fill_lock.release()

    def _fill_once(self) -> int:
        config = self.backfill
        if not config.enabled:
            return 0
        self.select(evaluation=False)
        with self.lock:
            pool = self._able(self.snapshot(), config.memory_mb, config.image)
            cpu_room = dict(self.productivity) if self.config.use_prediction else None
            plan = plan_backfill(pool, config, list(self.selected), cpu_room)
            recycled = [self._save(replace(self.leases[vm_id], state="stopping")) for vm_id in plan.recycles]
            starting = [self._save(self._new_lease(VmRole.BACKFILL, node_id, config.size, config.image, "backfill"))
                        for node_id in plan.launches]
        if plan.launches:
            log_event(log, "backfill.launching", count=len(starting),
                      nodes=",".join(sorted(set(plan.launches))), image=config.image)
        for lease in recycled:
            self.executor.submit(self._recycle, lease, config)
        results = list(self.executor.map(lambda lease: self._launch_backfill(lease, config), starting))
        return sum(results)

    def _recycle(self, lease: Lease, config: BackfillConfig) -> None:
        stopped = self._stop(lease, config.grace_seconds)
        with self.lock:
            self._end(lease, "ended", f"recycled after {config.duration_seconds} s")
        self.store.record("vm.recycled", lease.node_id, lease.lease_id, vm=lease.vm_name, stopped=stopped.outcome)
        self.request_fill()

    def _launch_backfill(self, lease: Lease, config: BackfillConfig) -> bool:
        try:
            self._launch(lease)
        except AgentCallFailed as exc:
            with self.lock:
                self._end(lease, "failed", str(exc))
            self.store.record("backfill.launch_failed", lease.node_id, lease.lease_id, error=str(exc))
            log_event(log, "backfill.launch_failed", logging.ERROR, node=lease.node_id, error=str(exc))
            return False
        with self.lock:
            current = self.leases.get(lease.lease_id)
            if current is not None and current.state == "starting":
                self._save(replace(current, state="running", launched_at=time.time()))
        self.store.record("vm.launched", lease.node_id, lease.lease_id, role="backfill", vm=lease.vm_name,
                          vcpus=lease.vcpus, memory_mib=lease.memory_mib)
        return True

    # -- reading ---------------------------------------------------------------------------------

    def node_rows(self) -> list[tuple[NodeState, NodeView, int, int]]:
        """(node, its view, on-demand VMs, backfill VMs) for every node, by id."""
        with self.lock:
            self._refresh_views()
            rows = []
            for node_id, node in sorted(self.nodes.items()):
                roles = [l.role for l in self.by_node.get(node_id, {}).values()]
                rows.append((node, self._node_views[node_id], roles.count("on_demand"), roles.count("backfill")))
            return rows

    def live_leases(self) -> list[Lease]:
        with self.lock:
            return sorted(self.leases.values(), key=lambda l: (l.created_at, l.lease_id))
