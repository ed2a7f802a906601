"""Agents that are real gRPC servers (mutual TLS with the lab PKI, the agent's authorization
table) but do no libvirt work: a hung one, which accepts every launch and stop and never
answers, and a quick one, which answers at once. For tests and benchmarks of the controller's
side of agent calls (controller.bulkheads); a healthy node in a benchmark is a real agent.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import grpc

from gleaner_common.authz import DenyList, Limits
from gleaner_common.pki import LabPki
from gleaner_common.rpc import RunningServer, ServerSettings, start_server
from protos import agent_pb2, agent_pb2_grpc

WORKERS = 160   # more than the old single pool (32) could ever send, so the server is never the bound


@dataclass
class CallLog:
    """What a fake agent was asked: calls in flight now and at most, and every call's name and start time."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    in_flight: int = 0
    most_in_flight: int = 0
    started: list[tuple[str, str, float]] = field(default_factory=list)   # (method, VM name, monotonic)
    changed: threading.Condition = field(init=False)

    def __post_init__(self) -> None:
        self.changed = threading.Condition(self.lock)

    def enter(self, method: str, name: str) -> None:
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            self.started.append((method, name, time.monotonic()))
            self.changed.notify_all()

    def leave(self) -> None:
        with self.lock:
            self.in_flight -= 1
            self.changed.notify_all()

    def wait_until(self, predicate, timeout: float) -> bool:
        with self.lock:
            return self.changed.wait_for(lambda: predicate(self), timeout)


class FakeAgent(agent_pb2_grpc.NodeAgentServicer):
    """hung=True: every LaunchDomain and TerminateDomain waits until `release` is set (then
    UNAVAILABLE); hung=False: answered at once, launched and shut down cleanly."""

    def __init__(self, hung: bool) -> None:
        self.hung = hung
        self.release = threading.Event()
        self.calls = CallLog()

    def _call(self, method: str, name: str, context) -> None:
        self.calls.enter(method, name)
        try:
            if self.hung:
                self.release.wait()
                context.abort(grpc.StatusCode.UNAVAILABLE, "the hung agent was released")
        finally:
            self.calls.leave()

    def LaunchDomain(self, request, context):
        self._call("launch", request.name, context)
        return agent_pb2.LaunchDomainResponse(domain=agent_pb2.Domain(name=request.name), created=True)

    def TerminateDomain(self, request, context):
        self._call("stop", request.name, context)
        return agent_pb2.TerminateDomainResponse(name=request.name, outcome=agent_pb2.TERMINATION_OUTCOME_CLEAN_SHUTDOWN,
                                                 duration_seconds=0.0, detail="fake agent")


def serve_fake_agent(pki: LabPki, node: str, hung: bool) -> tuple[FakeAgent, RunningServer]:
    """A fake agent for `node`, serving with the node's agent certificate on a free loopback port."""
    servicer = FakeAgent(hung)
    settings = ServerSettings("127.0.0.1:0", pki.agent(node), DenyList(pki.deny_list),
                              Limits(calls_per_identity=WORKERS, streams_per_identity=4, streams_total=16),
                              workers=WORKERS, max_concurrent=WORKERS + 16)
    server = start_server(settings, agent_pb2.DESCRIPTOR.services_by_name["NodeAgent"].full_name,
                          lambda s: agent_pb2_grpc.add_NodeAgentServicer_to_server(servicer, s))
    return servicer, server


def stop_fake_agent(agent: FakeAgent, server: RunningServer) -> None:
    agent.release.set()   # the hung calls end, so the server's threads do
    server.stop(grace=0)

