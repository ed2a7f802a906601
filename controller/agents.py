"""The controller's calls to node agents: one mutual-TLS channel per agent, plain results.

A channel to node N's reported address is made to insist on N's certificate (N.agent.gleaner):
an address that another node's agent serves, or anything else, is refused at the handshake, so
a node can never make the controller launch or stop VMs on another node."""
from __future__ import annotations

import threading
from dataclasses import dataclass

import grpc

from gleaner_common.identity import Role
from gleaner_common.pki import TlsFiles
from gleaner_common.rpc import channel_to
from protos import agent_pb2, agent_pb2_grpc

from .core.records import VmRole

AGENT_ROLES = {VmRole.ON_DEMAND: agent_pb2.ROLE_ON_DEMAND, VmRole.BACKFILL: agent_pb2.ROLE_BACKFILL}
OUTCOMES = {v: k.lower().removeprefix("termination_outcome_")
            for k, v in agent_pb2.TerminationOutcome.items()}


# codes after which a call's outcome is unknown: the agent may have done it (an agent killed
# mid-call, a timeout), so the call is asked again rather than taken as refused
OUTCOME_UNKNOWN = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                             grpc.StatusCode.CANCELLED})


class AgentCallFailed(RuntimeError):
    """The agent refused or could not be reached; the message says which and why. `answered`:
    the agent answered with a refusal (False: the call's outcome is unknown)."""

    def __init__(self, message: str, answered: bool = True) -> None:
        super().__init__(message)
        self.answered = answered


def _failed(verb: str, address: str, name: str, exc: grpc.RpcError) -> AgentCallFailed:
    return AgentCallFailed(f"agent at {address} could not {verb} {name}: {exc.code().name}: {exc.details()}",
                           answered=exc.code() not in OUTCOME_UNKNOWN)


@dataclass(frozen=True)
class Stopped:
    outcome: str          # clean_shutdown, destroyed_after_grace, destroyed_forced, already_stopped, not_found
    seconds: float
    detail: str


class AgentLinks:
    def __init__(self, tls: TlsFiles | None, timeout_seconds: float) -> None:
        self.tls = tls
        self.timeout = timeout_seconds
        self._channels: dict[tuple[str, str], grpc.Channel] = {}
        self._lock = threading.Lock()

    def _stub(self, node_id: str, address: str) -> agent_pb2_grpc.NodeAgentStub:
        with self._lock:
            channel = self._channels.get((node_id, address))
            if channel is None:
                for key in [k for k in self._channels if k[0] == node_id]:  # the node moved: one channel each
                    self._channels.pop(key).close()
                channel = self._channels[(node_id, address)] = channel_to(Role.AGENT, node_id, address, self.tls)
        return agent_pb2_grpc.NodeAgentStub(channel)

    def launch(self, node_id: str, address: str, name: str, role: VmRole, vcpus: int, memory_mib: int, image: str,
               lease_id: str, retire_after_seconds: int = 0, work_channel: bool = False) -> None:
        request = agent_pb2.LaunchDomainRequest(name=name, role=AGENT_ROLES[role], vcpus=vcpus,
                                                memory_mib=memory_mib, image=image, lease_id=lease_id,
                                                retire_after_seconds=retire_after_seconds, work_channel=work_channel)
        try:
            self._stub(node_id, address).LaunchDomain(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            raise _failed("launch", address, name, exc) from None

    def terminate(self, node_id: str, address: str, name: str, grace_seconds: int, force: bool = False) -> Stopped:
        request = agent_pb2.TerminateDomainRequest(name=name, force=force, grace_seconds=grace_seconds)
        try:
            reply = self._stub(node_id, address).TerminateDomain(request, timeout=self.timeout + grace_seconds)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                return Stopped("not_found", 0.0, "the agent no longer had it")
            raise _failed("terminate", address, name, exc) from None
        return Stopped(OUTCOMES.get(reply.outcome, "unknown"), reply.duration_seconds, reply.detail)

    def hibernate(self, node_id: str, address: str, name: str) -> Stopped:
        """Save a backfill VM's state on its node (HibernateDomain): Stopped("hibernated", ...);
        AgentCallFailed when the agent refused (its budget or disk, RESOURCE_EXHAUSTED: the VM
        still runs) or could not be reached."""
        request = agent_pb2.HibernateDomainRequest(name=name)
        try:
            reply = self._stub(node_id, address).HibernateDomain(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                return Stopped("not_found", 0.0, "the agent no longer had it")
            raise _failed("hibernate", address, name, exc) from None
        return Stopped("hibernated", reply.duration_seconds,
                       reply.detail or f"saved, {reply.state_bytes >> 20} MiB of state")

    def resume(self, node_id: str, address: str, name: str) -> float:
        """Restore a hibernated VM (ResumeDomain); the seconds it took. AgentCallFailed otherwise."""
        request = agent_pb2.ResumeDomainRequest(name=name)
        try:
            reply = self._stub(node_id, address).ResumeDomain(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            raise _failed("resume", address, name, exc) from None
        return reply.duration_seconds

    def close(self) -> None:
        with self._lock:
            for channel in self._channels.values():
                channel.close()
            self._channels.clear()
