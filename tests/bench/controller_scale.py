"""The controller at scale: 10,000 nodes and 100,000 VMs, synthetic, in the real controller code.

    python -m tests.bench.controller_scale [--nodes 10000] [--vms-per-node 10] [--requests 200]
                                           [--report-seconds 10] [--report-processes 1]

This process runs the controller exactly as gleaner-controller does (start_controller: the
SQLite store, the pool, the gRPC server with mutual TLS, the periodic jobs). The store is
seeded with 100,000 leases; every node is full (14 vCPUs: 4 on-demand VMs of 2, 6 backfill VMs of 1),
so each on-demand request must choose a node and victims. The nodes' agent address points
at a stand-in NodeAgent in this process that answers launches and terminations at once: it
stands for 10,000 hypervisors, the controller is what is measured.

- decision_p50_ms / decision_p99_ms: placement plus victim choice, as the controller times it
  (RequestVm's decision_ms) over --requests requests of 2 vCPUs sent through gRPC.
- selection_ms: one full volunteer-selection pass over every node (median of 5).
- reports_per_s: agent reports ingested per second, sent over real gRPC on loopback (mutual
  TLS) by --report-processes client processes, each with several report streams; the median
  of --report-rounds windows (this shared 2-core host is noisy; every round is printed).
Prints one JSON object.
"""
from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import statistics
import sys
import tempfile
import time
from concurrent import futures
from pathlib import Path

import grpc

from controller.cli import start_controller
from controller.config import ControllerConfig
from controller.store import Lease, Store
from nodeagent.client import client_channel
from nodeagent.config import TlsConfig
from nodeagent.logs import setup_logging
from nodeagent.pki import TlsFiles, ensure_lab_pki
from nodeagent.server import server_credentials
from protos import agent_pb2, agent_pb2_grpc, controller_pb2, controller_pb2_grpc
from tests.agentproc import free_port

NODE_CPUS, NODE_MEMORY = 14, 65536  # exactly what the VMs below take: every node is full
ON_DEMAND_PER_NODE = 4  # 2 vCPUs each; the backfill VMs have 1 vCPU each


class StandInAgent(agent_pb2_grpc.NodeAgentServicer):
    """Answers at once: the controller's side of launches and terminations is what is measured."""

    def LaunchDomain(self, request, context):
        return agent_pb2.LaunchDomainResponse(domain=agent_pb2.Domain(name=request.name), created=True)

    def TerminateDomain(self, request, context):
        return agent_pb2.TerminateDomainResponse(name=request.name,
                                                 outcome=agent_pb2.TERMINATION_OUTCOME_CLEAN_SHUTDOWN)


def node_id(i: int) -> str:
    return f"n{i:05d}"


def seed_leases(nodes: int, per_node: int, now: float) -> list[Lease]:
    leases = []
    for n in range(nodes):
        for v in range(per_node):
            on_demand = v < ON_DEMAND_PER_NODE
            lease_id = f"{'od' if on_demand else 'bf'}-{n:05d}{v:02d}"
            leases.append(Lease(lease_id, "on_demand" if on_demand else "backfill", node_id(n), f"vm-{lease_id}",
                                2 if on_demand else 1, 2048, "tiny", "bench", "running", now - 3600,
                                launched_at=now - 3600 + (n * per_node + v) % 3000))
    return leases


def report_for(n: int, per_node: int, address: str, seq: int) -> controller_pb2.NodeReport:
    report = controller_pb2.NodeReport(node_id=node_id(n), agent_address=address, cpus=NODE_CPUS,
                                       memory_mib=NODE_MEMORY, foreground_cpu_cores=(n % 13) * 0.5,
                                       seq=seq, sent_at=time.time())
    for v in range(per_node):
        on_demand = v < ON_DEMAND_PER_NODE
        lease_id = f"{'od' if on_demand else 'bf'}-{n:05d}{v:02d}"
        report.vms.add(name=f"vm-{lease_id}", lease_id=lease_id, role="on_demand" if on_demand else "backfill",
                       state="running", vcpus=2 if on_demand else 1, memory_mib=2048)
    return report


def send_reports(address: str, tls: TlsFiles, nodes: list[int], per_node: int, agent_address: str,
                 seconds: float, streams: int, results) -> None:
    """A client process: `streams` report streams, round-robin over its nodes, for `seconds`."""
    # Serialized once: the clients stand in for agents on other machines, so their own cost is kept small.
    reports = [report_for(n, per_node, agent_address, 1).SerializeToString() for n in nodes]

    def one_stream(k: int) -> int:
        mine = reports[k::streams]
        deadline = time.monotonic() + seconds

        def produce():
            i = 0
            while time.monotonic() < deadline:
                yield mine[i % len(mine)]
                i += 1
        with client_channel(address, tls) as channel:
            report = channel.stream_unary("/gleaner.controller.v1.Controller/Report", request_serializer=bytes,
                                          response_deserializer=controller_pb2.ReportAck.FromString)
            return report(produce(), timeout=seconds + 60).reports
    with futures.ThreadPoolExecutor(streams) as pool:
        results.put(sum(pool.map(one_stream, range(streams))))


def report_round(address: str, tls: TlsFiles, args: argparse.Namespace, agent_address: str) -> tuple[int, float]:
    """One window of report streams from client processes: (reports acknowledged, seconds)."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    shares = [list(range(args.nodes))[k::args.report_processes] for k in range(args.report_processes)]
    procs = [context.Process(target=send_reports, args=(address, tls, share, args.vms_per_node, agent_address,
                                                        args.report_seconds, args.streams_per_process, results))
             for share in shares]
    started = time.perf_counter()
    for p in procs:
        p.start()
    sent = sum(results.get(timeout=args.report_seconds + 120) for _ in procs)
    elapsed = time.perf_counter() - started
    for p in procs:
        p.join()
    return sent, elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--vms-per-node", type=int, default=10)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--report-seconds", type=float, default=10.0)
    parser.add_argument("--report-processes", type=int, default=1)
    parser.add_argument("--streams-per-process", type=int, default=8)
    parser.add_argument("--report-rounds", type=int, default=3, help="windows of --report-seconds; the median counts")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="gleaner-scale-"))
    pki = ensure_lab_pki(work / "pki")
    server_tls = pki["server"]
    tls = TlsConfig(ca=server_tls.ca, cert=server_tls.cert, key=server_tls.key)

    stand_in = grpc.server(futures.ThreadPoolExecutor(8))
    agent_pb2_grpc.add_NodeAgentServicer_to_server(StandInAgent(), stand_in)
    agent_port = stand_in.add_secure_port("127.0.0.1:0", server_credentials(tls))
    stand_in.start()
    agent_address = f"127.0.0.1:{agent_port}"

    config = ControllerConfig(listen=f"127.0.0.1:{free_port()}", state_dir=work / "controller", log_level="warning",
                              tls=tls, suspect_after_seconds=600, down_after_seconds=1200,
                              selection_interval_seconds=3600, max_agents=64)
    now = time.time()
    started = time.perf_counter()
    store = Store(config.store_path)
    store.put_leases(seed_leases(args.nodes, args.vms_per_node, now))
    store.close()
    seeded_s = time.perf_counter() - started
    setup_logging("warning")
    running = start_controller(config)
    pool = running.pool
    try:
        started = time.perf_counter()
        for n in range(args.nodes):  # every node reports once, so it is up
            pool.ingest(report_for(n, args.vms_per_node, agent_address, 0))
        registered_s = time.perf_counter() - started
        selection = []
        for _ in range(5):  # the first pass also brings every node's view up to date: steady state from here
            t0 = time.perf_counter()
            pool.select(evaluation=True)
            selection.append((time.perf_counter() - t0) * 1000)
            gc.freeze()  # as the controller's evaluation job does after each pass
        stub = controller_pb2_grpc.ControllerStub(client_channel(config.listen, pki["client"]))
        decisions = []
        for i in range(args.requests):
            reply = stub.RequestVm(controller_pb2.VmRequest(vcpus=2, memory_mib=2048, image="tiny", owner="bench",
                                                            request_id=f"scale-{i}"), timeout=60)
            if reply.outcome != "placed" or not reply.preempted:
                raise SystemExit(f"request {i}: {reply.outcome} {reply.reason} (preempted {len(reply.preempted)})")
            decisions.append(reply.decision_ms)

        rates = [report_round(config.listen, pki["client"], args, agent_address) for _ in range(args.report_rounds)]
    finally:
        running.stop()
        stand_in.stop(0)
    ordered = sorted(decisions)
    print(json.dumps({
        "nodes": args.nodes, "vms": args.nodes * args.vms_per_node, "requests": len(decisions),
        "decision_p50_ms": round(statistics.median(ordered), 2),
        "decision_p99_ms": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 2),
        "decision_max_ms": round(ordered[-1], 2),
        "selection_ms": round(statistics.median(selection), 1), "selection_first_ms": round(selection[0], 1),
        "reports_per_s": round(statistics.median(sent / elapsed for sent, elapsed in rates)),
        "reports_per_s_rounds": [round(sent / elapsed) for sent, elapsed in rates],
        "report_streams": args.report_processes * args.streams_per_process,
        "seed_s": round(seeded_s, 1), "first_reports_s": round(registered_s, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
