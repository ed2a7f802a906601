"""The controller's gRPC service: converts messages, maps errors, and leaves the work to PoolService."""
from __future__ import annotations

import dataclasses
import json
import math
import time

import grpc

from gleaner_common import watchdog
from gleaner_common.authz import DenyList, Limits, current_identity
from gleaner_common.ids import InvalidField
from gleaner_common.rpc import RunningServer, ServerSettings, rpc_errors, start_server
from protos import controller_pb2, controller_pb2_grpc
from protos.words import LEASE_STATE, REQUEST_OUTCOME, VM_ROLE, to_wire

from . import checks
from .config import ControllerConfig
from .intake import ReportRefused, pause
from .core.tenancy import TENANT_BACKFILL_KEYS
from .core.records import BackfillConfig
from .service import AlreadyPlaced, LeaseNotFound, PoolService, RequestNotFound, RequestResult
from .store import Lease, LeaseConflict, StoreError
from . import tenants as tenancy
from .tenants import TenantExists, TenantNotFound, TenantRefused
from .core.records import BUILT_IN_TENANTS, Size, TenantRecord

# Most specific first. A store that fails (disk full, I/O error) is the controller's trouble, not
# the caller's: UNAVAILABLE, to be tried again, with the store's message; never INTERNAL/UNKNOWN.
rpc = rpc_errors([
    (InvalidField, grpc.StatusCode.INVALID_ARGUMENT),
    (LeaseNotFound, grpc.StatusCode.NOT_FOUND),
    (RequestNotFound, grpc.StatusCode.NOT_FOUND),
    (AlreadyPlaced, grpc.StatusCode.FAILED_PRECONDITION),
    (TenantNotFound, grpc.StatusCode.NOT_FOUND),
    (TenantExists, grpc.StatusCode.ALREADY_EXISTS),
    (TenantRefused, grpc.StatusCode.FAILED_PRECONDITION),
    (LeaseConflict, grpc.StatusCode.ALREADY_EXISTS),
    (StoreError, grpc.StatusCode.UNAVAILABLE),
])


def lease_to_proto(lease: Lease) -> controller_pb2.Lease:
    start = lease.launched_at or lease.created_at
    return controller_pb2.Lease(
        lease_id=lease.lease_id, role=lease.role, node_id=lease.node_id, vm_name=lease.vm_name, vcpus=lease.vcpus,
        memory_mib=lease.memory_mib, image=lease.image, owner=lease.owner, state=lease.state,
        created_at=lease.created_at, launched_at=lease.launched_at or 0.0, ended_at=lease.ended_at or 0.0,
        end_reason=lease.end_reason, age_seconds=max((lease.ended_at or time.time()) - start, 0.0),
        vm_role=to_wire(controller_pb2.VmRole, VM_ROLE, lease.role),
        lease_state=to_wire(controller_pb2.LeaseState, LEASE_STATE, lease.state))


def result_to_proto(result: RequestResult) -> controller_pb2.VmRequestResult:
    record = result.record
    reply = controller_pb2.VmRequestResult(request_id=record.request_id, outcome=record.outcome, reason=record.reason,
                                           decision_ms=result.decision_ms, total_seconds=result.total_seconds,
                                           policy=result.policy,
                                           request_outcome=to_wire(controller_pb2.RequestOutcome, REQUEST_OUTCOME,
                                                                   record.outcome))
    if result.lease is not None:
        reply.lease.CopyFrom(lease_to_proto(result.lease))
    for p in result.preempted:
        reply.preempted.add(lease_id=p.lease.lease_id, vm_name=p.lease.vm_name, outcome=p.stopped.outcome,
                            seconds=p.stopped.seconds, work_lost_vcpu_seconds=p.work_lost)
    return reply


def backfill_to_proto(config: BackfillConfig) -> controller_pb2.BackfillConfig:
    return controller_pb2.BackfillConfig(**config.as_dict())


def within(context, wait: float) -> float:
    """How long a call may wait for its outcome: `wait`, but answered a second before the caller's
    deadline ("pending" or "stopping", which it can ask about again, beats DEADLINE_EXCEEDED)."""
    remaining = context.time_remaining()
    return wait if remaining is None else max(0.0, min(wait, remaining - 1.0))


class ControllerServicer(controller_pb2_grpc.ControllerServicer):
    def __init__(self, pool: PoolService, on_backfill_changed) -> None:
        self.pool = pool
        self.on_backfill_changed = on_backfill_changed

    @rpc
    def Report(self, request_iterator, context):
        """The caller's node only: the authorization interceptor holds every message to it."""
        count, known = 0, set()
        caller = current_identity()
        try:
            stream = self.pool.open_report_stream(caller.name if caller else "")
            paced = stream.paced(request_iterator, context.is_active, self.pool.report_over_budget)
            for report in watchdog.watched(paced, "intake"):   # a report stuck in hand trips the watchdog
                try:
                    checks.report(report, known)
                except InvalidField as exc:
                    self.pool.report_refused(report.node_id, str(exc))
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"report refused: {exc}")
                self.pool.ingest(report)
                count += 1
        except ReportRefused as exc:
            self.pool.report_refused(exc.node_id, str(exc))
            pause(exc.retry_after, context.is_active)   # a node in its penalty waits it out, at no cost
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"report budget: {exc}")
        return controller_pb2.ReportAck(reports=count)

    @rpc
    def RequestVm(self, request, context):
        return result_to_proto(self.pool.request(request.vcpus, request.memory_mib, request.image, request.owner,
                                                 request.request_id, within(context, self.pool.request_wait())))

    @rpc
    def CancelRequest(self, request, context):
        return result_to_proto(self.pool.cancel(request.request_id))

    @rpc
    def Release(self, request, context):
        lease, stopped = self.pool.release(request.lease_id, request.force, within(context, self.pool.release_wait()))
        return controller_pb2.ReleaseResult(lease=lease_to_proto(lease), outcome=stopped.outcome,
                                            seconds=stopped.seconds)

    @rpc
    def ListNodes(self, request, context):
        now = self.pool.clock()   # the clock the service stamps reports with
        reply = controller_pb2.ListNodesResponse()
        selected = set(self.pool.selected)
        answers = self.pool.explain()
        for node, view, on_demand, backfill in self.pool.node_rows():
            answer = answers.get(node.node_id)
            reply.nodes.add(node_id=node.node_id, state=node.state, agent_address=node.address, cpus=node.capacity.vcpus,
                            memory_mib=node.capacity.memory_mib, allocated_vcpus=view.allocated.vcpus,
                            allocated_memory_mib=view.allocated.memory_mib, on_demand_vms=on_demand,
                            backfill_vms=backfill,
                            foreground_cpu_cores=node.foreground_cpu,
                            predicted_foreground_cpu_cores=self.pool.predicted.get(node.node_id, 0.0),
                            potential_productivity=self.pool.productivity.get(node.node_id, 0.0),
                            last_report_age_seconds=now - node.last_report, selected=node.node_id in selected,
                            on_demand_cpu_cores=node.on_demand_cpu,
                            host_other_cpu_cores=max(node.foreground_cpu - node.on_demand_cpu, 0.0),
                            fill_code=answer.code if answer else "", fill_reasons=answer.reasons if answer else (),
                            fill_vms=answer.vms if answer else 0)
        return reply

    @rpc
    def ListVms(self, request, context):
        leases = self.pool.live_leases()
        if request.include_ended:
            leases = self.pool.store.all_leases()
        leases = self.pool.visible_leases(leases)   # a tenant-admin's own tenant's only
        reply = controller_pb2.ListVmsResponse(leases=[lease_to_proto(l) for l in leases])
        with self.pool.lock:   # the books' progress statements (controller.core.progress), issue 26
            book = self.pool.ledger.progress
            said = [book.statement(l.lease_id) for l in reply.leases]
        for proto, statement in zip(reply.leases, said):
            if statement is not None:
                proto.progress_done, proto.progress_total = statement.done, statement.total
        return reply

    @rpc
    def GetBackfill(self, request, context):
        return backfill_to_proto(self.pool.backfill)

    @rpc
    def SetBackfill(self, request, context):
        changes = {f.name: getattr(request, f.name) for f in dataclasses.fields(BackfillConfig)
                   if request.HasField(f.name)}
        config = checks.backfill(self.pool.backfill, changes)
        self.pool.set_backfill(config)
        self.on_backfill_changed(config)
        return backfill_to_proto(config)

    @rpc
    def SetReserve(self, request, context):
        self.pool.set_reserve(checks.reserve(request.node_id, request.vcpus, request.memory_mib, request.whole_node))
        return self.ListReserves(None, context)

    @rpc
    def ListReserves(self, request, context):
        return controller_pb2.ListReservesResponse(reserves=[
            controller_pb2.Reserve(node_id=r.node_id, vcpus=r.vcpus, memory_mib=r.memory_mib, whole_node=r.whole_node)
            for r in self.pool.reserves.values()])

    @rpc
    def GetReserveStatus(self, request, context):
        return reserve_status_to_proto(*self.pool.reserve_status())

    @rpc
    def AddHint(self, request, context):
        note = self.pool.add_hint(*checks.hint(request.nodes, request.in_hours, request.for_hours, request.label))
        reply = self.GetReserveStatus(None, context)
        reply.note = note
        return reply

    @rpc
    def SetReserveSettings(self, request, context):
        self.pool.set_reserve_settings({f.name: getattr(request, f.name) for f in request.DESCRIPTOR.fields
                                        if request.HasField(f.name)})
        return self.GetReserveStatus(None, context)

    @rpc
    def CancelHints(self, request, context):
        self.pool.cancel_hints(checks.hint_label(request.label))
        return self.GetReserveStatus(None, context)

    @rpc
    def ListEvents(self, request, context):
        after, limit, kind = checks.events_query(request.after_seq, request.limit, request.kind)
        events = self.pool.store.events(after, limit, kind, newest=request.newest)
        return events_to_proto(events, events[-1].seq if events else after)

    @rpc
    def FollowEvents(self, request, context):
        """Checked before the stream starts (INVALID_ARGUMENT), then the stream itself."""
        after, _limit, kind = checks.events_query(request.after_seq, FOLLOW_BATCH, request.kind)
        seconds = request.max_seconds if 0 < request.max_seconds <= FOLLOW_MAX_SECONDS else FOLLOW_MAX_SECONDS
        return self._follow(after, kind, time.monotonic() + seconds, context)

    def _follow(self, after: int, kind: str, until: float, context):
        """New events in batches of at most FOLLOW_BATCH, read from the store every
        FOLLOW_POLL_SECONDS while quiet, until `until` or the caller goes (is_active() also ends
        a revoked caller's stream). The store's read is the one ListEvents makes."""
        while context.is_active() and time.monotonic() < until:
            try:
                events = self.pool.store.events(after, FOLLOW_BATCH, kind, newest=False)
            except StoreError as exc:
                context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
            if events:
                after = events[-1].seq
                yield events_to_proto(events, after)
            else:
                time.sleep(min(FOLLOW_POLL_SECONDS, max(0.0, until - time.monotonic())))

    @rpc
    def Status(self, request, context):
        status = controller_pb2.PoolStatus(backfill_enabled=self.pool.backfill.enabled)
        for node, *_ in self.pool.node_rows():
            setattr(status, f"nodes_{node.state}", getattr(status, f"nodes_{node.state}") + 1)
            if node.state == "up":
                status.cpus += node.capacity.vcpus
                status.memory_mib += node.capacity.memory_mib
                status.foreground_cpu_cores += node.foreground_cpu
                status.backfill_cpu_cores += node.backfill_cpu
        for lease in self.pool.live_leases():
            if not lease.held.vcpus and not lease.held.memory_mib:
                continue
            role = "on_demand" if lease.role == "on_demand" else "backfill"
            setattr(status, f"{role}_vcpus", getattr(status, f"{role}_vcpus") + lease.vcpus)
            setattr(status, f"{role}_memory_mib", getattr(status, f"{role}_memory_mib") + lease.memory_mib)
            setattr(status, f"{role}_vms", getattr(status, f"{role}_vms") + 1)
        # a victim saved (hibernated) is preempted all the same; a save refused ends in vm.preempted only
        status.preemptions = sum(self.pool.store.count_events(kind) for kind in ("vm.preempted", "vm.hibernated"))
        status.rejections = self.pool.store.count_events("request.rejected")
        kinds, upper, rbt = self.pool.tenant_summary()
        status.tenants_on_demand, status.tenants_batch = kinds["on_demand"], kinds["batch"]
        status.tenants_upper_vcpus, status.tenants_upper_memory_mib, status.tenants_rbt = upper.vcpus, \
            upper.memory_mib, rbt
        return status

    # -- tenants: checked, admitted and audited by PoolService ----------------------------------

    @rpc
    def CreateTenant(self, request, context):
        record = self.pool.create_tenant(request.name, request.kind, Size(request.lower_vcpus, request.lower_memory_mib),
                                         Size(request.upper_vcpus, request.upper_memory_mib))
        return tenant_to_proto(record, Size(0, 0), [])

    @rpc
    def ListTenants(self, request, context):
        capacity = self.pool.tenant_capacity()
        config = self.pool.config
        reply = controller_pb2.ListTenantsResponse(
            tenants=[tenant_to_proto(*row) for row in self.pool.tenant_rows(request.name)], rbt=config.tenants_rbt,
            urr=config.tenants_urr, capacity_vcpus=capacity.vcpus, capacity_memory_mib=capacity.memory_mib)
        with self.pool.lock:   # a batch tenant's job as its guests say it (controller.core.progress), issue 26
            book, sizings = self.pool.ledger.progress, self.pool.ledger.sizings
            said = [book.progress(t.name) if t.kind == "batch" else None for t in reply.tenants]
            sized = [sizings.get(t.name) for t in reply.tenants]
        for proto, progress, sizing in zip(reply.tenants, said, sized):
            if progress is not None:
                proto.progress_done, proto.progress_total = int(progress.done), int(progress.total)
            if sizing is not None and proto.goal_json:
                proto.goal_state = "done" if sizing.done else "on_track" if sizing.on_track else "at_risk"
                proto.goal_projected_finish = 0.0 if math.isinf(sizing.projected_finish_s) else \
                    sizing.projected_finish_s
                proto.goal_dedicated_vcpus, proto.goal_volunteer_vcpus = sizing.dedicated_vcpus, sizing.volunteer_vcpus
                proto.goal_explain = sizing.explain
        return reply

    @rpc
    def SetTenant(self, request, context):
        changes = {f: getattr(request, f) for f in tenancy.BOUND_FIELDS if request.HasField(f)}
        self.pool.set_tenant(request.name, changes)
        return tenant_to_proto(*self.pool.tenant_rows(request.name)[0])

    @rpc
    def SetTenantGoal(self, request, context):
        goal = None if request.clear else {
            "kind": request.kind, "work_vcpu_hours": request.work_vcpu_hours,
            **({"deadline_s": request.deadline} if request.kind == "deadline" else
               {"price_per_dedicated_vcpu_hour": request.price_per_dedicated_vcpu_hour,
                "price_per_volunteer_vcpu_hour": request.price_per_volunteer_vcpu_hour,
                "fixed_cost_per_hour": request.fixed_cost_per_hour})}
        self.pool.set_tenant_goal(request.name, goal)
        return tenant_to_proto(*self.pool.tenant_rows(request.name)[0])

    @rpc
    def SetTenantBackfill(self, request, context):
        changes = {f: getattr(request, f) for f in TENANT_BACKFILL_KEYS if request.HasField(f)}
        self.pool.set_tenant_backfill(request.name, changes, request.reset)
        return tenant_to_proto(*self.pool.tenant_rows(request.name)[0])

    @rpc
    def DeleteTenant(self, request, context):
        record, released = self.pool.delete_tenant(request.name, request.drain,
                                                   within(context, self.pool.release_wait()))
        return controller_pb2.DeleteTenantResponse(tenant=tenant_to_proto(record, Size(0, 0), []), released=released)


def tenant_to_proto(tenant: TenantRecord, used: Size, lease_ids: list[str]) -> controller_pb2.Tenant:
    return controller_pb2.Tenant(
        name=tenant.name, kind=tenant.kind, lower_vcpus=tenant.lower_vcpus, lower_memory_mib=tenant.lower_memory_mib,
        upper_vcpus=tenant.upper_vcpus, upper_memory_mib=tenant.upper_memory_mib, created_at=tenant.created_at,
        backfill_json=tenant.backfill or "", goal_json=tenant.goal or "", used_vcpus=used.vcpus,
        used_memory_mib=used.memory_mib, lease_ids=lease_ids, built_in=tenant.name in BUILT_IN_TENANTS)


# events --follow: a stream's bounds. A batch a message, as ListEvents' limit bounds a page; one
# hour a stream at most (gleanctl asks again), and the server's stream limits (authz.Limits) bound
# how many there are.
FOLLOW_BATCH = 100
FOLLOW_MAX_SECONDS = 3600
FOLLOW_POLL_SECONDS = 0.5


def events_to_proto(events, last_seq: int) -> controller_pb2.ListEventsResponse:
    return controller_pb2.ListEventsResponse(last_seq=last_seq, events=[
        controller_pb2.AuditEvent(seq=e.seq, at=e.at, kind=e.kind, node_id=e.node_id, lease_id=e.lease_id,
                                  detail_json=json.dumps(e.detail, sort_keys=True)) for e in events])


def reserve_status_to_proto(settings, target, hints, reserved_nodes, waiting) -> controller_pb2.ReserveStatus:
    return controller_pb2.ReserveStatus(
        settings_json=json.dumps(settings.as_dict(), sort_keys=True), explain=target.explain(),
        target_nodes=target.nodes, static_nodes=target.static, predicted_nodes=target.predicted,
        hinted_nodes=target.hinted, pool_nodes=target.pool, reserved_nodes=reserved_nodes, waiting_requests=waiting,
        hints=[controller_pb2.Hint(nodes=h.nodes, start_at=h.start_at, until=h.until, label=h.label) for h in hints])


def build_server(config: ControllerConfig, pool: PoolService, on_backfill_changed) -> RunningServer:
    """Each agent's report stream holds a worker thread, so there is one per agent plus room for
    admins; every call is authorized (gleaner_common.authz.TABLE) and bounded per identity."""
    servicer = ControllerServicer(pool, on_backfill_changed)
    workers = config.max_agents + 32
    limits = Limits(calls_per_identity=32, streams_per_identity=2, streams_total=config.max_agents + 8)
    settings = ServerSettings(config.listen, config.tls.files, DenyList(config.tls.deny_list), limits,
                              workers=workers, max_concurrent=workers + 64)
    return start_server(settings, controller_pb2.DESCRIPTOR.services_by_name["Controller"].full_name,
                        lambda server: controller_pb2_grpc.add_ControllerServicer_to_server(servicer, server))
