"""Abuse: an attacker with valid certificates tries to stall the servers while an admin works.

    python -m tests.bench.abuse [--seconds 30] [--abuser-threads 8]

A real controller process and a real agent process (on libvirt's test:/// driver, so on-demand
VMs start at once and the figures are the servers', not QEMU's) run with mutual TLS.

- The abuser (its own process, so it has its own CPU and client library) holds certificates of
  the kinds that can reach the servers: an agent, a viewer, and a certificate from the pool's CA
  that names no Gleaner identity. For the whole window its threads open as many long-lived
  streams as they can (report streams to the controller, health watches to both servers,
  WatchEvents to the agent) and keep them open, and flood calls that must be refused: a viewer
  changing backfill settings and requesting VMs, an agent reporting for another node, the
  anonymous certificate reading status, a viewer asking for events past the end of time.
- The admin, meanwhile, alternates reads (Status, ListVms, ListNodes) with on-demand requests
  (RequestVm of 1 vCPU, then Release), one call at a time, each timed by the client from the call
  until the reply. Every error the admin sees counts in legit_errors.

Printed (one JSON object): legit_calls, legit_errors, legit_p50_ms, legit_p99_ms (over every
admin call), legit_requests (on-demand VMs placed and released), abuser_streams_opened (streams
the servers admitted), abuser_streams_refused (RESOURCE_EXHAUSTED or PERMISSION_DENIED when
opening), abuser_calls, abuser_calls_refused, abuser_calls_accepted (a flood call the servers
did not refuse: must be 0), and the servers' CPU over the window. Left out: connection set-up
before the window, and the abuser's own CPU.
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
REFUSALS = {grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED,
            grpc.StatusCode.UNAVAILABLE}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def anonymous_certificate(lab: pki.LabPki, out: Path) -> TlsFiles:
    """Signed by the pool's CA, but naming no Gleaner identity (only a DNS name)."""
    from cryptography import x509
    return odd_certificate(lab, out, "anonymous", [x509.DNSName("nobody.example")])


def abuse(controller: str, agent: str, certs: dict, seconds: float, threads: int, results) -> None:
    """The abuser's process: streams held open and a flood of calls that must be refused."""
    tls = {k: TlsFiles(*map(Path, v)) for k, v in certs.items()}
    deadline = time.monotonic() + seconds
    counts = {"streams_opened": 0, "streams_refused": 0, "calls": 0, "calls_refused": 0, "calls_accepted": 0}
    lock = threading.Lock()
    held = []

    def count(key: str, n: int = 1) -> None:
        with lock:
            counts[key] += n

    def ctl(kind: str):
        return controller_pb2_grpc.ControllerStub(channel_to(Role.CONTROLLER, "", controller, tls[kind]))

    def agt(kind: str):
        channel = channel_to(Role.AGENT, NODE, agent, tls[kind])
        return agent_pb2_grpc.NodeAgentStub(channel), health_pb2_grpc.HealthStub(channel)

    def hold_streams() -> None:
        """Open streams until refused, keep the admitted ones open, and keep trying."""
        report = controller_pb2.NodeReport(node_id="abuse-rogue", agent_address="127.0.0.1:1", cpus=1,
                                           memory_mib=1024)
        controller_agent = ctl("agent")
        controller_health = health_pb2_grpc.HealthStub(channel_to(Role.CONTROLLER, "", controller, tls["viewer"]))
        agent_stub, agent_health = agt("viewer")

        def endless():
            while time.monotonic() < deadline:
                yield report
                time.sleep(0.5)
        openers = itertools.cycle([
            lambda: controller_agent.Report.future(endless(), timeout=seconds + 5),
            lambda: controller_health.Watch(health_pb2.HealthCheckRequest(), timeout=seconds + 5),
            lambda: agent_health.Watch(health_pb2.HealthCheckRequest(), timeout=seconds + 5),
            lambda: agent_stub.WatchEvents(agent_pb2.WatchEventsRequest(), timeout=seconds + 5),
        ])
        while time.monotonic() < deadline:
            call = next(openers)()  # every kind of call here is also a grpc.Future
            try:
                refused = call.exception(timeout=0.5)   # a refusal ends the call at once
            except grpc.FutureTimeoutError:
                held.append(call)                       # still open: the server admitted it
                count("streams_opened")
                continue
            count("streams_refused" if refused is not None else "streams_opened")

    def flood() -> None:
        viewer, anonymous, agent_ctl = ctl("viewer"), ctl("anonymous"), ctl("agent")
        agent_stub, _ = agt("viewer")
        bad = itertools.cycle([
            lambda: viewer.SetBackfill(controller_pb2.SetBackfillRequest(enabled=True), timeout=5),
            lambda: viewer.RequestVm(controller_pb2.VmRequest(vcpus=1, memory_mib=128, image="tiny", owner="x",
                                                              request_id="abuse"), timeout=5),
            lambda: anonymous.Status(controller_pb2.StatusRequest(), timeout=5),
            lambda: viewer.ListEvents(controller_pb2.ListEventsRequest(after_seq=2**64 - 1), timeout=5),
            lambda: agent_ctl.Report(iter([controller_pb2.NodeReport(node_id="someone-else")]), timeout=5),
            lambda: agent_stub.TerminateDomain(agent_pb2.TerminateDomainRequest(name="x", force=True), timeout=5),
            lambda: agent_stub.LaunchDomain(agent_pb2.LaunchDomainRequest(name="x"), timeout=5),
        ])
        while time.monotonic() < deadline:
            try:
                next(bad)()
                count("calls_accepted")
            except grpc.RpcError as exc:
                count("calls_refused" if exc.code() in REFUSALS else "calls_accepted")
            count("calls")

    workers = [threading.Thread(target=hold_streams) for _ in range(max(threads // 2, 1))]
    workers += [threading.Thread(target=flood) for _ in range(max(threads - len(workers), 1))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for call in held:
        call.cancel()
    results.put(counts)


def admin_work(controller: ControllerProcess, seconds: float) -> tuple[list[float], int, int]:
    """The admin's calls, one at a time: (latencies in ms, errors, on-demand VMs placed)."""
    stub = controller.stub()
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
                try:
                    stub.Release(controller_pb2.ReleaseRequest(lease_id=reply.lease.lease_id, force=True), timeout=30)
                except grpc.RpcError as exc:
                    errors += 1
                    print(f"release failed: {exc.code().name}: {exc.details()}", file=sys.stderr)
                latencies.append((time.perf_counter() - started) * 1000)
    return latencies, errors, placed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--abuser-threads", type=int, default=8)
    args = parser.parse_args(argv)
    exit_cleanly_on_sigterm()
    env = LabEnv.create()
    controller = ControllerProcess(env, name="abuse-ctl", settings=dict(use_prediction=False, log_level="info"))
    controller.start()
    agent = AgentProcess(env, name=NODE, settings=agent_settings(controller, libvirt_uri="test:///default",
                                                                 metrics_listen="", log_level="info"))
    agent.start()
    try:
        wait_for(lambda: controller.node_state(NODE) == "up", 30, "the node to report")
        lab = env.pki
        certs = {"agent": lab.agent("abuse-rogue"), "viewer": lab.viewer,
                 "anonymous": anonymous_certificate(lab, env.root)}
        certs = {k: (str(v.ca), str(v.cert), str(v.key)) for k, v in certs.items()}
        processes = [psutil.Process(p.process.pid) for p in (controller, agent)]
        cpu_before = [p.cpu_times() for p in processes]
        context = multiprocessing.get_context("spawn")
        results = context.Queue()
        abuser = context.Process(target=abuse, args=(controller.address, agent.address, certs, args.seconds,
                                                     args.abuser_threads, results))
        abuser.start()
        time.sleep(1.0)  # the abuser has its streams and flood going before the admin starts
        latencies, errors, placed = admin_work(controller, args.seconds - 2)
        counts = results.get(timeout=args.seconds + 60)
        abuser.join(30)
        cpu_after = [p.cpu_times() for p in processes]
        still_serving = controller.stub().Status(controller_pb2.StatusRequest(), timeout=10) is not None
    finally:
        agent.stop()
        controller.stop()
        env.remove()
    used = [(a.user + a.system - b.user - b.system) / args.seconds * 100 for a, b in zip(cpu_after, cpu_before)]
    print(json.dumps({
        "seconds": args.seconds, "legit_calls": len(latencies), "legit_errors": errors,
        "legit_p50_ms": round(statistics.median(latencies), 2), "legit_p99_ms": round(percentile(latencies, 99), 2),
        "legit_max_ms": round(max(latencies), 2), "legit_requests": placed,
        "abuser_streams_opened": counts["streams_opened"], "abuser_streams_refused": counts["streams_refused"],
        "abuser_calls": counts["calls"], "abuser_calls_refused": counts["calls_refused"],
        "abuser_calls_accepted": counts["calls_accepted"], "abuser_threads": args.abuser_threads,
        "controller_cpu_percent": round(used[0], 1), "agent_cpu_percent": round(used[1], 1),
        "still_serving": still_serving}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
