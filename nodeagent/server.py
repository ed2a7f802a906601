"""The agent's gRPC server: a thin layer that converts messages and maps errors to status codes."""
from __future__ import annotations

import functools
import logging
import queue
from typing import Any, Callable

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from gleaner_common.authz import DenyList, Limits
from gleaner_common.ids import InvalidField
from gleaner_common.rpc import RunningServer, ServerSettings, rpc_errors, start_server
from gleaner_common.vocabulary import PriorityClass, VmRole, class_of, role_of
from protos import agent_pb2, agent_pb2_grpc

from .agent import AgentParts
from .config import AgentConfig
from .domains import DomainConflict, TerminationOutcome
from .events import Event
from .host.errors import HostExhausted, HostRefused, HostUnavailable
from .host.hypervisor import NoSuchDomain
from .host.workchannel import progress_fields
from .inventory import DomainNotFound, ManagedDomain, NotManaged
from .metrics import Sampler, Snapshot
from .validation import validate_launch, validate_name

log = logging.getLogger(__name__)

# The wire's words (agent.proto): a VM's role, and the priority class it runs in. A domain's
# metadata keeps the class it was launched in, which says its role (vocabulary.role_of).
CLASS_TO_PROTO = {PriorityClass.FOREGROUND: agent_pb2.PRIORITY_CLASS_FOREGROUND,
                  PriorityClass.VOLUNTEER: agent_pb2.PRIORITY_CLASS_VOLUNTEER}
CLASS_FROM_PROTO = {v: k for k, v in CLASS_TO_PROTO.items()}
ROLE_TO_PROTO = {VmRole.ON_DEMAND: agent_pb2.ROLE_ON_DEMAND, VmRole.BACKFILL: agent_pb2.ROLE_BACKFILL}
ROLE_FROM_PROTO = {v: k for k, v in ROLE_TO_PROTO.items()}


def role_to_proto(launched_class: PriorityClass) -> int:
    """The wire's role of a VM launched in this class."""
    return ROLE_TO_PROTO[role_of(launched_class)]
STATE_TO_PROTO = {
    "running": agent_pb2.DOMAIN_STATE_RUNNING, "blocked": agent_pb2.DOMAIN_STATE_BLOCKED,
    "paused": agent_pb2.DOMAIN_STATE_PAUSED, "shutting_down": agent_pb2.DOMAIN_STATE_SHUTTING_DOWN,
    "shutoff": agent_pb2.DOMAIN_STATE_SHUTOFF, "crashed": agent_pb2.DOMAIN_STATE_CRASHED,
    "suspended": agent_pb2.DOMAIN_STATE_SUSPENDED, "hibernated": agent_pb2.DOMAIN_STATE_HIBERNATED,
}
OUTCOME_TO_PROTO = {
    TerminationOutcome.CLEAN_SHUTDOWN: agent_pb2.TERMINATION_OUTCOME_CLEAN_SHUTDOWN,
    TerminationOutcome.DESTROYED_AFTER_GRACE: agent_pb2.TERMINATION_OUTCOME_DESTROYED_AFTER_GRACE,
    TerminationOutcome.DESTROYED_FORCED: agent_pb2.TERMINATION_OUTCOME_DESTROYED_FORCED,
    TerminationOutcome.ALREADY_STOPPED: agent_pb2.TERMINATION_OUTCOME_ALREADY_STOPPED,
}
class MetricsNotReady(RuntimeError):
    """No snapshot yet: rates need two samples."""


class AgentBug(RuntimeError):
    """An exception no part of the agent raises on purpose: a bug, answered INTERNAL."""


# The codes gRPC intends (first match wins, so the most specific first: BeyondHost and
# ImageUnusable are InvalidFields). Host failures are classified where they happen
# (host/errors.py; libvirt's by its error code, host/hypervisor.error_class). Whatever is none
# of these, including a HypervisorError for XML libvirt cannot parse, is a bug: INTERNAL.
ERROR_CODES: list[tuple[type[BaseException], grpc.StatusCode]] = [
    (HostExhausted, grpc.StatusCode.RESOURCE_EXHAUSTED),     # more than the host has: CPUs, memory, disk
    (HostUnavailable, grpc.StatusCode.UNAVAILABLE),          # libvirtd away or too slow: try again
    (HostRefused, grpc.StatusCode.FAILED_PRECONDITION),      # image missing or broken, guest cannot start
    (InvalidField, grpc.StatusCode.INVALID_ARGUMENT),
    (DomainNotFound, grpc.StatusCode.NOT_FOUND),
    (NoSuchDomain, grpc.StatusCode.NOT_FOUND),               # undefined behind the agent's back meanwhile
    (DomainConflict, grpc.StatusCode.ALREADY_EXISTS),
    (NotManaged, grpc.StatusCode.FAILED_PRECONDITION),
    (MetricsNotReady, grpc.StatusCode.UNAVAILABLE),
    (AgentBug, grpc.StatusCode.INTERNAL),
]
_EXPECTED = tuple(cls for cls, _code in ERROR_CODES)


def bugs_as_internal(method: Callable[..., Any]) -> Callable[..., Any]:
    """Any other exception is a bug: logged with its traceback, answered INTERNAL (not gRPC's
    UNKNOWN) with a message that says where to look."""
    @functools.wraps(method)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return method(self, request, context)
        except _EXPECTED:
            raise
        except Exception as exc:
            log.error("rpc.bug", exc_info=True, extra={"method": method.__name__})   # error=: the traceback
            raise AgentBug(f"the agent failed unexpectedly ({type(exc).__name__}: {exc}); "
                           "its log has the traceback") from exc
    return wrapper
def domain_to_proto(domain: ManagedDomain) -> agent_pb2.Domain:
    launched = Timestamp()
    launched.FromDatetime(domain.launched_at)
    proto = agent_pb2.Domain(
        name=domain.name, uuid=domain.uuid, role=role_to_proto(domain.role),
        state=STATE_TO_PROTO.get(domain.state, agent_pb2.DOMAIN_STATE_UNSPECIFIED), vcpus=domain.vcpus,
        memory_mib=domain.memory_mib, launched_at=launched, lease_id=domain.lease_id,
        cpu_time_ns=domain.cpu_time_ns, image=domain.image, kernel_cmdline=domain.kernel_cmdline,
        console_log=domain.console_log, cpuset=domain.cpuset, priority_class=CLASS_TO_PROTO[domain.priority_class],
        boosted=domain.boosted, work_state=domain.work.state, work_for_s=domain.work.for_s,
        hibernated_bytes=domain.hibernated_bytes, slept_s=domain.slept_s, retire_after_seconds=domain.retire_after_s,
        **progress_fields(domain.work))
    if domain.hibernated_at is not None:
        proto.hibernated_at.FromNanoseconds(int(domain.hibernated_at * 1e9))
    return proto


def event_to_proto(event: Event) -> agent_pb2.Event:
    when = Timestamp()
    when.FromDatetime(event.time)
    return agent_pb2.Event(time=when, kind=event.kind, domain=event.domain, detail=event.detail,
                           fields=event.fields)


def rpc(method: Callable[..., Any]) -> Callable[..., Any]:
    """A unary method answering every error with its intended status code (ERROR_CODES)."""
    return rpc_errors(ERROR_CODES)(bugs_as_internal(method))


def snapshot_to_proto(snap: Snapshot) -> agent_pb2.MetricsSnapshot:
    when = Timestamp()
    when.FromDatetime(snap.time)
    domains = [agent_pb2.DomainMetrics(
        name=d.name, role=role_to_proto(d.role), priority_class=CLASS_TO_PROTO[d.priority_class],
        cpu_cores=d.cpu_cores, memory_bytes=d.memory_bytes, block_read_bytes_per_s=d.block_read_bytes_per_s,
        block_write_bytes_per_s=d.block_write_bytes_per_s, block_read_ops_per_s=d.block_read_ops_per_s,
        block_write_ops_per_s=d.block_write_ops_per_s, net_rx_bytes_per_s=d.net_rx_bytes_per_s,
        net_tx_bytes_per_s=d.net_tx_bytes_per_s) for d in snap.domains]
    residual = snap.residual
    return agent_pb2.MetricsSnapshot(
        time=when, interval_seconds=snap.interval_seconds,
        host=agent_pb2.HostMetrics(cpus=snap.cpus, **snap.host), domains=domains,
        residual=agent_pb2.ResidualCapacity(
            foreground_cpu_demand_cores=residual.foreground_cpu_demand_cores,
            residual_cpu_cores=residual.residual_cpu_cores, foreground_memory_bytes=residual.foreground_memory_bytes,
            residual_memory_bytes=residual.residual_memory_bytes),
        agent_cpu_percent=snap.agent_cpu_percent)


class NodeAgentServicer(agent_pb2_grpc.NodeAgentServicer):
    def __init__(self, agent: AgentParts, sampler: Sampler) -> None:
        self.agent = agent
        self.domains = agent.domains
        self.inventory = agent.inventory
        self.events = agent.events
        self.sampler = sampler

    @rpc
    def DescribeHost(self, request, context):
        host = self.agent.describe_host()
        return agent_pb2.HostDescription(
            hostname=host.facts.hostname, cpus=host.facts.cpus, memory_mib=host.facts.memory_mib,
            libvirt_version=host.facts.libvirt_version, qemu_version=host.facts.qemu_version,
            cgroup_version=host.cgroup.version, cpu_idle_supported=host.cgroup.cpu_idle,
            domain_type=host.domain_type, libvirt_uri=host.libvirt_uri, agent_version=host.agent_version,
            managed_domains=host.managed_domains, disk_scheduler=host.disk_scheduler,
            volunteer_disk_mechanism=host.disk_mechanism,
            hibernation_budget_bytes=host.hibernation.budget_bytes,
            hibernation_used_bytes=host.hibernation.used_bytes,
            hibernation_room_bytes=host.hibernation.room_bytes)

    @rpc
    def ListDomains(self, request, context):
        return agent_pb2.ListDomainsResponse(domains=[domain_to_proto(d) for d in self.inventory.list()])

    @rpc
    def LaunchDomain(self, request, context):
        role = ROLE_FROM_PROTO.get(request.role)
        if role is None:
            raise InvalidField("role", "must be ROLE_ON_DEMAND or ROLE_BACKFILL")
        spec = validate_launch(   # launched in its role's priority class
            name=request.name, role=class_of(role), vcpus=request.vcpus,
            memory_mib=request.memory_mib, image=request.image, kernel_cmdline=request.kernel_cmdline,
            lease_id=request.lease_id, limits=self.inventory.limits(), cpuset=request.cpuset,
            retire_after_seconds=request.retire_after_seconds, work_channel=request.work_channel)
        domain, created = self.domains.launch(spec)
        return agent_pb2.LaunchDomainResponse(domain=domain_to_proto(domain), created=created)

    @rpc
    def TerminateDomain(self, request, context):
        grace = request.grace_seconds if request.HasField("grace_seconds") else None
        result = self.domains.terminate(validate_name(request.name), force=request.force, grace_seconds=grace)
        return agent_pb2.TerminateDomainResponse(name=result.name, outcome=OUTCOME_TO_PROTO[result.outcome],
                                                 duration_seconds=result.duration_seconds,
                                                 detail=result.detail)


    @rpc
    def HibernateDomain(self, request, context):
        saved = self.agent.hibernation.hibernate(validate_name(request.name))
        when = Timestamp()
        when.FromNanoseconds(int(saved.hibernated_at * 1e9))
        return agent_pb2.HibernateDomainResponse(name=saved.name, duration_seconds=saved.duration_seconds,
                                                 state_bytes=saved.state_bytes, detail=saved.detail,
                                                 saved=saved.saved, hibernated_at=when)

    @rpc
    def ResumeDomain(self, request, context):
        resumed = self.agent.hibernation.resume(validate_name(request.name))
        return agent_pb2.ResumeDomainResponse(domain=domain_to_proto(resumed.domain),
                                              duration_seconds=resumed.duration_seconds, resumed=resumed.resumed)

    @rpc
    def SetDomainClass(self, request, context):
        name = validate_name(request.name)
        cls = CLASS_FROM_PROTO.get(request.priority_class)
        if cls is None:
            raise InvalidField("priority_class", "must be PRIORITY_CLASS_FOREGROUND or PRIORITY_CLASS_VOLUNTEER")
        return domain_to_proto(self.domains.set_class(name, cls))

    @rpc
    def GetMetrics(self, request, context):
        snap = self.sampler.latest()
        if snap is None:
            raise MetricsNotReady("no metrics yet: the first rates come one sampling interval after start")
        return snapshot_to_proto(snap)

    def WatchEvents(self, request, context):
        subscription = self.events.subscribe()
        try:
            while context.is_active():
                try:
                    yield event_to_proto(subscription.get(timeout=0.5))
                except queue.Empty:
                    continue
        finally:
            self.events.unsubscribe(subscription)


# One agent serves one controller and a few people: these bound what any caller can hold. The
# controller may stop many VMs at once (each call waits out a grace period), so calls get room.
AGENT_LIMITS = Limits(calls_per_identity=48, streams_per_identity=4, streams_total=16)


def build_server(config: AgentConfig, agent: AgentParts, sampler: Sampler,
                 workers: int = 64) -> RunningServer:
    """The agent's started server: mutual TLS, every call authorized (gleaner_common.authz.TABLE)."""
    servicer = NodeAgentServicer(agent, sampler)
    settings = ServerSettings(config.listen, config.tls.files, DenyList(config.tls.deny_list), AGENT_LIMITS,
                              workers=workers, max_concurrent=workers * 2)
    return start_server(settings, agent_pb2.DESCRIPTOR.services_by_name["NodeAgent"].full_name,
                        lambda server: agent_pb2_grpc.add_NodeAgentServicer_to_server(servicer, server))
