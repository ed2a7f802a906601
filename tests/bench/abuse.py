"""Abuse: an attacker with valid certificates tries to stall the servers while an admin works.

    python -m tests.bench.abuse [--seconds 30] [--abuser-threads 8] [--abuser-identities 1]
    python -m tests.bench.abuse --hung-agent [...]   (tests/bench/abuse_hung_agent.py)

A real controller process and a real agent process (on libvirt's test:/// driver, so on-demand
VMs start at once and the figures are the servers', not QEMU's) run with mutual TLS.

- The abuser (its own process, so it has its own CPU and client library) holds certificates of
  the kinds that can reach the servers: agents, viewers, and a certificate from the pool's CA
  that names no Gleaner identity. With --abuser-identities N it holds N agent and N viewer
  certificates (issued with the project's PKI code before the window) and spreads its streams
  and calls over them, so the per-identity limits do not stop it first and the servers' limits
  on streams in total are what it meets: the controller takes max_agents + 8 streams (264 by
  default) at 2 an identity, so N of 140 or more reaches it; the agent takes 16 at 4 an identity.
  For the whole window its threads open as many long-lived streams as they can (report streams
  to the controller, each agent identity for its own node; health watches to both servers;
  WatchEvents to the agent) and keep them open, and flood calls that must be refused: a viewer
  changing backfill settings and requesting VMs, an agent reporting for another node, the
  anonymous certificate reading status, a viewer asking for events past the end of time, a
  viewer terminating and launching domains on the agent.
- The admin, meanwhile, alternates reads (Status, ListVms, ListNodes) with on-demand requests
  (RequestVm of 1 vCPU, then Release), one call at a time. Every error the admin sees counts in
  legit_errors.

What is timed: each admin call, by the admin's client, with time.perf_counter from just before
the stub call until it returns (gRPC client, loopback, TLS record layer, the server's work); a
Release after a placed request is a call of its own. The admin starts 1 s after the abuser and
works for --seconds - 2; its channel's TLS connection is made by one untimed Status before.
Not timed: the abuser's connection set-up, and anything after the admin's window.

Server CPU: psutil.Process(pid).cpu_times() of the controller and agent processes (user +
system of all their threads; no child processes), read just before the abuser starts and again
after it has finished and the admin's work is done; the difference over the wall-clock time
between the two readings (cpu_window_s), in percent of one core. The abuser's own CPU is not
counted.

Printed (one JSON object): legit_calls, legit_errors, legit_p50_ms, legit_p99_ms, legit_max_ms
(over every admin call), legit_requests (on-demand VMs placed and released),
abuser_streams_opened (streams the servers admitted), abuser_streams_refused (RESOURCE_EXHAUSTED
or PERMISSION_DENIED when opening), abuser_calls, abuser_calls_refused (PERMISSION_DENIED,
INVALID_ARGUMENT or RESOURCE_EXHAUSTED), abuser_calls_accepted (a flood call the servers
answered otherwise: must be 0), abuser_unavailable (stream openings and calls the servers did
not answer: UNAVAILABLE or DEADLINE_EXCEEDED; not a refusal but a server that stopped
answering, so it must be 0 too), abuser_identities, and the servers' CPU.
"""
from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import statistics
import sys
import threading
import time
from pathlib import Path

import grpc
import psutil
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gleaner_common import pki
from gleaner_common.identity import Role
from gleaner_common.pki import TlsFiles
from gleaner_common.rpc import channel_to
from protos import agent_pb2, agent_pb2_grpc, controller_pb2, controller_pb2_grpc
from tests.agentproc import AgentProcess, LabEnv, exit_cleanly_on_sigterm, odd_certificate, wait_for
from tests.controllerproc import ControllerProcess, agent_settings

NODE = "abuse-node"
REFUSALS = {grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED}
# Not a refusal: the server did not answer (it stopped serving, or is stalled). Counted apart.
NOT_ANSWERED = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def anonymous_certificate(lab: pki.LabPki, out: Path) -> TlsFiles:
    """Signed by the pool's CA, but naming no Gleaner identity (only a DNS name)."""
    from cryptography import x509
    return odd_certificate(lab, out, "anonymous", [x509.DNSName("nobody.example")])


def abuser_identities(lab: pki.LabPki, out: Path, count: int) -> dict[str, list[TlsFiles]]:
    """`count` agent and viewer certificates from the pool's CA, and one naming no identity."""
    out.mkdir(exist_ok=True)
    return {"agent": [pki.issue(lab.directory, Role.AGENT, f"abuse-rogue{i}", out_dir=out) for i in range(count)],
            "viewer": [pki.issue(lab.directory, Role.VIEWER, f"abuse-viewer{i}", out_dir=out) for i in range(count)],
            "anonymous": [anonymous_certificate(lab, out)]}


class Clients:
    """The abuser's stubs, one channel per (server, identity), made on first use."""

    def __init__(self, controller: str, agent: str, certs: dict[str, list[TlsFiles]]) -> None:
        self.controller, self.agent, self.certs = controller, agent, certs
        self.channels: dict[tuple[str, str, int], grpc.Channel] = {}
        self.lock = threading.Lock()

    def channel(self, server: str, kind: str, i: int) -> grpc.Channel:
        i %= len(self.certs[kind])
        with self.lock:
            if (server, kind, i) not in self.channels:
                role, name, address = (Role.CONTROLLER, "", self.controller) if server == "controller" \
                    else (Role.AGENT, NODE, self.agent)
                self.channels[(server, kind, i)] = channel_to(role, name, address, self.certs[kind][i])
            return self.channels[(server, kind, i)]

    def ctl(self, kind: str, i: int = 0) -> controller_pb2_grpc.ControllerStub:
        return controller_pb2_grpc.ControllerStub(self.channel("controller", kind, i))

    def agt(self, kind: str, i: int = 0) -> agent_pb2_grpc.NodeAgentStub:
        return agent_pb2_grpc.NodeAgentStub(self.channel("agent", kind, i))

    def health(self, server: str, i: int) -> health_pb2_grpc.HealthStub:
        return health_pb2_grpc.HealthStub(self.channel(server, "viewer", i))

    def node_of(self, i: int) -> str:
        """The node the i-th agent certificate may report for."""
        return f"abuse-rogue{i % len(self.certs['agent'])}"


def abuse(controller: str, agent: str, certs: dict, seconds: float, threads: int, results) -> None:
    """The abuser's process: streams held open and a flood of calls that must be refused, spread
    over every identity it holds."""
    clients = Clients(controller, agent, {k: [TlsFiles(*map(Path, files)) for files in v] for k, v in certs.items()})
    deadline = time.monotonic() + seconds
    counts = {"streams_opened": 0, "streams_refused": 0, "calls": 0, "calls_refused": 0, "calls_accepted": 0,
              "unavailable": 0}
    lock = threading.Lock()
    held = []

    def count(key: str, n: int = 1) -> None:
        with lock:
            counts[key] += n

    def endless(node: str):
        report = controller_pb2.NodeReport(node_id=node, agent_address="127.0.0.1:1", cpus=1, memory_mib=1024)
        while time.monotonic() < deadline:
            yield report
            time.sleep(0.5)

    def openers(start: int):
        """Stream openings, cycling over the kinds and, kind by kind, over the identities."""
        for i in itertools.count(start):
            timeout = seconds + 5
            yield lambda i=i: clients.ctl("agent", i).Report.future(endless(clients.node_of(i)), timeout=timeout)
            yield lambda i=i: clients.health("controller", i).Watch(health_pb2.HealthCheckRequest(), timeout=timeout)
            yield lambda i=i: clients.health("agent", i).Watch(health_pb2.HealthCheckRequest(), timeout=timeout)
            yield lambda i=i: clients.agt("viewer", i).WatchEvents(agent_pb2.WatchEventsRequest(), timeout=timeout)

    def hold_streams(start: int) -> None:
        """Open streams until refused, keep the admitted ones open, and keep trying."""
        for opener in openers(start):
            if time.monotonic() >= deadline:
                return
            call = opener()  # every kind of call here is also a grpc.Future
            try:
                failed = call.exception(timeout=0.5)    # a refusal ends the call at once
            except grpc.FutureTimeoutError:
                held.append(call)                       # still open: the server admitted it
                count("streams_opened")
                continue
            if failed is None:
                count("streams_opened")
            else:
                count("unavailable" if failed.code() in NOT_ANSWERED else "streams_refused")

    def bad_calls(start: int):
        for i in itertools.count(start):
            viewer, agent_view, agent_ctl = clients.ctl("viewer", i), clients.agt("viewer", i), clients.ctl("agent", i)
            yield lambda: viewer.SetBackfill(controller_pb2.SetBackfillRequest(enabled=True), timeout=5)
            yield lambda: viewer.RequestVm(controller_pb2.VmRequest(vcpus=1, memory_mib=128, image="tiny",
                                                                    owner="x", request_id="abuse"), timeout=5)
            yield lambda: clients.ctl("anonymous").Status(controller_pb2.StatusRequest(), timeout=5)
            yield lambda: viewer.ListEvents(controller_pb2.ListEventsRequest(after_seq=2**64 - 1), timeout=5)
            yield lambda: agent_ctl.Report(iter([controller_pb2.NodeReport(node_id="someone-else")]), timeout=5)
            yield lambda: agent_view.TerminateDomain(agent_pb2.TerminateDomainRequest(name="x", force=True),
                                                     timeout=5)
            yield lambda: agent_view.LaunchDomain(agent_pb2.LaunchDomainRequest(name="x"), timeout=5)

    def flood(start: int) -> None:
        for call in bad_calls(start):
            if time.monotonic() >= deadline:
                return
            try:
                call()
                count("calls_accepted")
            except grpc.RpcError as exc:
                code = exc.code()
                count("calls_refused" if code in REFUSALS else "unavailable" if code in NOT_ANSWERED
                      else "calls_accepted")
            count("calls")

    holders = max(threads // 2, 1)
    workers = [threading.Thread(target=hold_streams, args=(i,)) for i in range(holders)]
    workers += [threading.Thread(target=flood, args=(i,)) for i in range(max(threads - holders, 1))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for call in held:
        call.cancel()
    results.put(counts)


def admin_work(controller: ControllerProcess, seconds: float,
               stamps: list[float] | None = None) -> tuple[list[float], int, int]:
    """The admin's calls, one at a time: (latencies in ms, errors, on-demand VMs placed); with
    `stamps`, each call's start (time.monotonic()) is appended to it, in the latencies' order."""
    stamps = [] if stamps is None else stamps
    stub = controller.stub()
    stub.Status(controller_pb2.StatusRequest(), timeout=10)  # untimed: the channel's TLS connection
    latencies, errors, placed = [], 0, 0
    deadline = time.monotonic() + seconds
    for i in itertools.count():
        if time.monotonic() >= deadline:
            break
        calls = [lambda: stub.Status(controller_pb2.StatusRequest(), timeout=10),
                 lambda: stub.ListVms(controller_pb2.ListVmsRequest(), timeout=10),
                 lambda: stub.ListNodes(controller_pb2.ListNodesRequest(), timeout=10)]
        if i % 4 == 3:
            calls = [lambda: stub.RequestVm(controller_pb2.VmRequest(vcpus=1, memory_mib=128, image="tiny",
                                                                     owner="admin", request_id=f"abuse-legit-{i}"),
                                            timeout=30)]
        for call in calls:
            started = time.perf_counter()
            stamps.append(time.monotonic())
            try:
                reply = call()
            except grpc.RpcError as exc:
                errors += 1
                print(f"admin call failed: {exc.code().name}: {exc.details()}", file=sys.stderr)
                continue
            finally:
                latencies.append((time.perf_counter() - started) * 1000)
            if isinstance(reply, controller_pb2.VmRequestResult):
                if reply.outcome != "placed":
                    errors += 1
                    print(f"request {reply.request_id}: {reply.outcome}: {reply.reason}", file=sys.stderr)
                    continue
                placed += 1
                started = time.perf_counter()
                stamps.append(time.monotonic())
                try:
                    stub.Release(controller_pb2.ReleaseRequest(lease_id=reply.lease.lease_id, force=True), timeout=30)
                except grpc.RpcError as exc:
                    errors += 1
                    print(f"release failed: {exc.code().name}: {exc.details()}", file=sys.stderr)
                latencies.append((time.perf_counter() - started) * 1000)
    return latencies, errors, placed


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--hung-agent" in argv:   # a bench of its own: tests/bench/abuse_hung_agent.py
        from tests.bench import abuse_hung_agent
        return abuse_hung_agent.main([a for a in argv if a != "--hung-agent"])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--abuser-threads", type=int, default=8)
    parser.add_argument("--abuser-identities", type=int, default=1,
                        help="agent and viewer certificates the abuser spreads its streams and calls over; "
                             "140 or more reach the controller's limit on streams in total")
    parser.add_argument("--report-flood", action="store_true",
                        help="instead: one agent floods its own node's reports (tests/bench/abuse_flood.py)")
    parser.add_argument("--phases", type=int, default=3, help="with --report-flood: flood and quiet phases, each")
    args = parser.parse_args(argv)
    if args.report_flood:
        from tests.bench.abuse_flood import run_flood
        return run_flood(args.seconds, args.phases)
    exit_cleanly_on_sigterm()
    env = LabEnv.create()
    controller = ControllerProcess(env, name="abuse-ctl", settings=dict(use_prediction=False, log_level="info"))
    controller.start()
    agent = AgentProcess(env, name=NODE, settings=agent_settings(controller, libvirt_uri="test:///default",
                                                                 metrics_listen="", log_level="info"))
    agent.start()
    try:
        wait_for(lambda: controller.node_state(NODE) == "up", 30, "the node to report")
        certs = abuser_identities(env.pki, env.root / "abuser", max(args.abuser_identities, 1))
        certs = {k: [(str(f.ca), str(f.cert), str(f.key)) for f in v] for k, v in certs.items()}
        processes = [psutil.Process(p.process.pid) for p in (controller, agent)]
        cpu_before, cpu_started = [p.cpu_times() for p in processes], time.monotonic()
        context = multiprocessing.get_context("spawn")
        results = context.Queue()
        abuser = context.Process(target=abuse, args=(controller.address, agent.address, certs, args.seconds,
                                                     args.abuser_threads, results))
        abuser.start()
        time.sleep(1.0)  # the abuser has its streams and flood going before the admin starts
        latencies, errors, placed = admin_work(controller, args.seconds - 2)
        counts = results.get(timeout=args.seconds + 60)
        abuser.join(30)
        cpu_after, cpu_window = [p.cpu_times() for p in processes], time.monotonic() - cpu_started
        still_serving = controller.stub().Status(controller_pb2.StatusRequest(), timeout=10) is not None
    finally:
        agent.stop()
        controller.stop()
        env.remove()
    used = [(a.user + a.system - b.user - b.system) / cpu_window * 100 for a, b in zip(cpu_after, cpu_before)]
    print(json.dumps({
        "seconds": args.seconds, "legit_calls": len(latencies), "legit_errors": errors,
        "legit_p50_ms": round(statistics.median(latencies), 2), "legit_p99_ms": round(percentile(latencies, 99), 2),
        "legit_max_ms": round(max(latencies), 2), "legit_requests": placed,
        "abuser_streams_opened": counts["streams_opened"], "abuser_streams_refused": counts["streams_refused"],
        "abuser_calls": counts["calls"], "abuser_calls_refused": counts["calls_refused"],
        "abuser_calls_accepted": counts["calls_accepted"], "abuser_unavailable": counts["unavailable"],
        "abuser_threads": args.abuser_threads, "abuser_identities": max(args.abuser_identities, 1),
        "controller_cpu_percent": round(used[0], 1), "agent_cpu_percent": round(used[1], 1),
        "cpu_window_s": round(cpu_window, 1),
        "still_serving": still_serving}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
