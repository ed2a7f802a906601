"""The controller's calls to node agents: one mutual-TLS channel per agent, plain results."""
from __future__ import annotations

import threading
from dataclasses import dataclass

import grpc

from nodeagent.client import client_channel
from nodeagent.pki import TlsFiles
from protos import agent_pb2, agent_pb2_grpc

from .policy import VmRole

AGENT_ROLES = {VmRole.ON_DEMAND: agent_pb2.ROLE_FOREGROUND, VmRole.BACKFILL: agent_pb2.ROLE_VOLUNTEER}
OUTCOMES = {v: k.lower().removeprefix("termination_outcome_")
            for k, v in agent_pb2.TerminationOutcome.items()}


class AgentCallFailed(RuntimeError):
    """The agent refused or could not be reached; the message says which and why."""


@dataclass(frozen=True)
class Stopped:
    outcome: str          # clean_shutdown, destroyed_after_grace, destroyed_forced, already_stopped, not_found
    seconds: float
    detail: str


class AgentLinks:
    def __init__(self, tls: TlsFiles | None, timeout_seconds: float) -> None:
        self.tls = tls
        self.timeout = timeout_seconds
        self._channels: dict[str, grpc.Channel] = {}
        self._lock = threading.Lock()

    def _stub(self, address: str) -> agent_pb2_grpc.NodeAgentStub:
        with self._lock:
            channel = self._channels.get(address)
            if channel is None:
                channel = self._channels[address] = client_channel(address, self.tls)
        return agent_pb2_grpc.NodeAgentStub(channel)

    def launch(self, address: str, name: str, role: VmRole, vcpus: int, memory_mib: int, image: str,
               lease_id: str) -> None:
        request = agent_pb2.LaunchDomainRequest(name=name, role=AGENT_ROLES[role], vcpus=vcpus,
                                                memory_mib=memory_mib, image=image, lease_id=lease_id)
        try:
            self._stub(address).LaunchDomain(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            raise AgentCallFailed(f"agent at {address} could not launch {name}: {exc.code().name}: "
                                  f"{exc.details()}") from None

    def terminate(self, address: str, name: str, grace_seconds: int, force: bool = False) -> Stopped:
        request = agent_pb2.TerminateDomainRequest(name=name, force=force, grace_seconds=grace_seconds)
        try:
            reply = self._stub(address).TerminateDomain(request, timeout=self.timeout + grace_seconds)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                return Stopped("not_found", 0.0, "the agent no longer had it")
            raise AgentCallFailed(f"agent at {address} could not terminate {name}: {exc.code().name}: "
                                  f"{exc.details()}") from None
        return Stopped(OUTCOMES.get(reply.outcome, "unknown"), reply.duration_seconds, reply.detail)

    def close(self) -> None:
        with self._lock:
            for channel in self._channels.values():
                channel.close()
            self._channels.clear()
