"""The controller at scale: 10,000 nodes and 100,000 VMs, synthetic, in the real controller code.

    python -m tests.bench.controller_scale [--nodes 10000] [--vms-per-node 10] [--requests 200]
                                           [--report-seconds 10] [--report-rounds 3] [--change-share 0.1]
                                           [--report-processes 1] [--streams-per-process 8]

This process runs the controller exactly as gleaner-controller does (start_controller: the
SQLite store, the pool, the gRPC server with mutual TLS, the periodic jobs). The store is
seeded with 100,000 leases; every node is full (14 vCPUs: 4 on-demand VMs of 2, 6 backfill VMs of 1),
so each on-demand request must choose a node and victims. The nodes' agent address points
at a stand-in NodeAgent in this process that answers launches and terminations at once: it
stands for 10,000 hypervisors, the controller is what is measured. The controller's log
(warning level, as configured) goes to controller.log in the run's temporary directory.

What each figure times, and what it leaves out:

- decision_p50_ms / decision_p99_ms / decision_max_ms: RequestVm's decision_ms (the request
  record's decided_ms) over --requests requests of 2 vCPUs sent through gRPC, one at a time.
  It is the whole booking under the pool's lock: from when the request holds the lock (its
  replay lookup in the store), through the snapshot, the placement, booking the new lease and
  its victims (their store writes) and writing the pending request record, to just before the
  lock is released. Left out: waiting for the lock (no reports flow during the requests), the
  log line, and everything outside the lock (gRPC, the stand-in agent's calls, the final record).
  A rejected request's record write would also be left out; none is rejected here.
- placement_p50_ms / placement_p99_ms: the snapshot plus placement alone, timed in this process
  right before each request by calling pool.snapshot() and policy.place_on_demand (the pure
  function, with the seed the controller uses for that request) outside gRPC and the store.
  That snapshot brings the views of the nodes the previous request changed up to date, so the
  request's own snapshot finds nothing to refresh (a few nodes: microseconds).
- selection_ms: one full volunteer-selection pass over every node (median of 5; the first pass,
  which also builds every node's view, is selection_first_ms).
- reports_per_s: agent reports ingested per second with unchanged VM lists, the median of
  --report-rounds windows (reports_per_s_rounds; this shared 2-core host is noisy). Reports carry
  the fields nodeagent.reporter fills in, and each differs from the node's previous one: the
  node's load (foreground_cpu_cores, cpu_busy_cores, the residual CPU and memory) and each VM's
  cpu_cores cycle through REPORT_VARIANTS variants, and seq and sent_at are fresh in each report.
  The VM lists match the controller's books, so ingest takes its unchanged-list path and
  _match_vms does not run (matched_reports_rounds, reports that went through it, checks that).
- reports_per_s_mixed: the same, except that a share --change-share of reports (change_share;
  the share actually sent is change_share_sent) changes the node's VM list: a node's list
  either omits one of its backfill VMs (a stop, as the controller sees it) or shows it again
  (it came back), chosen at random per report. So _match_vms runs for those reports
  (matched_reports_mixed_rounds, about change_share of the reports) through its real
  transitions with their store writes and log lines: an omitted VM, launched long ago
  (LOST_AFTER_SECONDS passed), is marked lost (vm.lost); shown again it is recovered
  (vm.recovered); mixed_events counts those audit events. At most one backfill VM per node is
  omitted at a time and the next list change always shows it again, so a lost VM is never
  seen missing by a second match and ended (vm.gone); the run stays the same over rounds.
  After each mixed round every node reports its full list once more in this process (not
  timed), so every round starts from the same books (lost_after_settle should be 0).
  Both rates: reports sent over real gRPC on loopback (mutual TLS) by --report-processes client
  processes with --streams-per-process report streams each, every node on one stream, in turn.
  The clients stand in for agents on other machines, but share the 2 cores with the controller,
  so they are kept cheap: each report is put together from pre-serialized parts (the node's
  header and each VM, per variant) plus the encoded seq, sent_at and agent_version: the same
  bytes protobuf would write for the whole message. A window runs from when
  every client process is ready (reports built, channels connected) until every stream's
  acknowledgement is back (the controller has ingested every report sent); client start-up is
  left out. Unchanged and mixed rounds alternate, so the host's noise falls on both alike.
  Before the first round every node reports its current VMs (the books after the requests) once
  in this process, so the controller has seen each list.
Prints one JSON object.
"""
from __future__ import annotations

import argparse
import gc
import json
import logging
import multiprocessing
import random
import statistics
import struct
import sys
import tempfile
import time
from concurrent import futures
from pathlib import Path

import grpc

from controller.cli import start_controller
from controller.config import ControllerConfig
from controller.policy import Size, place_on_demand
from controller.store import Lease, Store
from nodeagent import __version__
from nodeagent.client import client_channel
from nodeagent.config import TlsConfig
from nodeagent.logs import setup_logging
from nodeagent.pki import TlsFiles, ensure_lab_pki
from nodeagent.server import server_credentials
from protos import agent_pb2, agent_pb2_grpc, controller_pb2, controller_pb2_grpc
from tests.agentproc import free_port

NODE_CPUS, NODE_MEMORY = 14, 65536  # exactly what the VMs below take: every node is full
ON_DEMAND_PER_NODE = 4  # 2 vCPUs each; the backfill VMs have 1 vCPU each
REPORT_VARIANTS = 4     # load figures per node, cycled, so a node's consecutive reports differ
MIXED_EVENTS = ("vm.lost", "vm.recovered", "vm.gone", "vm.adopted", "vm.unexpected")
VmRow = tuple  # (name, lease_id, role, vcpus, memory_mib, launched_at): a VM as its agent reports it


class StandInAgent(agent_pb2_grpc.NodeAgentServicer):
    """Answers at once: the controller's side of launches and terminations is what is measured."""

    def LaunchDomain(self, request, context):
        return agent_pb2.LaunchDomainResponse(domain=agent_pb2.Domain(name=request.name), created=True)

    def TerminateDomain(self, request, context):
        return agent_pb2.TerminateDomainResponse(name=request.name,
                                                 outcome=agent_pb2.TERMINATION_OUTCOME_CLEAN_SHUTDOWN)


def node_id(i: int) -> str:
    return f"n{i:05d}"


def node_leases(n: int, per_node: int, now: float) -> list[Lease]:
    leases = []
    for v in range(per_node):
        on_demand = v < ON_DEMAND_PER_NODE
        lease_id = f"{'od' if on_demand else 'bf'}-{n:05d}{v:02d}"
        leases.append(Lease(lease_id, "on_demand" if on_demand else "backfill", node_id(n), f"vm-{lease_id}",
                            2 if on_demand else 1, 2048, "tiny", "bench", "running", now - 3600,
                            launched_at=now - 3600 + (n * per_node + v) % 3000))
    return leases


def seed_leases(nodes: int, per_node: int, now: float) -> list[Lease]:
    return [lease for n in range(nodes) for lease in node_leases(n, per_node, now)]


def vm_row(lease: Lease) -> VmRow:
    return lease.vm_name, lease.lease_id, lease.role, lease.vcpus, lease.memory_mib, lease.launched_at or 0.0


def booked_rows(pool, nodes: int) -> list[list[VmRow]]:
    """Every node's VMs as the controller's books have them now: what its agent would report."""
    with pool.lock:
        return [sorted(vm_row(lease) for lease in pool.by_node.get(node_id(n), {}).values()
                       if lease.state in ("running", "starting"))
                for n in range(nodes)]


class NodeParts:
    """One node's reports, pre-serialized per load variant: a header (fields 1-8) and each VM
    (field 9, one element each). A report is header + VMs + tail (seq, sent_at, agent_version: 10-12),
    the same bytes protobuf would write for the whole message, since it writes fields in order."""
    __slots__ = ("headers", "vms", "full", "backfill")

    def __init__(self, n: int, rows: list[VmRow], agent_address: str, variants: int = REPORT_VARIANTS) -> None:
        self.headers, self.vms, self.full = [], [], []
        self.backfill = [i for i, row in enumerate(rows) if row[2] == "backfill"]
        memory = sum(row[4] for row in rows)
        for variant in range(variants):
            rng = random.Random(n * REPORT_VARIANTS + variant)
            used = [round(rng.uniform(0.05, row[3]), 3) for row in rows]
            foreground = round(rng.uniform(0.0, 4.0), 3)
            busy = foreground + sum(used)
            self.headers.append(controller_pb2.NodeReport(
                node_id=node_id(n), agent_address=agent_address, cpus=NODE_CPUS, memory_mib=NODE_MEMORY,
                cpu_busy_cores=round(busy, 3), foreground_cpu_cores=foreground,
                residual_cpu_cores=round(max(NODE_CPUS - busy, 0.0), 3),
                residual_memory_mib=max(NODE_MEMORY - memory - rng.randrange(0, 4096), 0)).SerializeToString())
            self.vms.append([controller_pb2.NodeReport(vms=[controller_pb2.ReportedVm(
                name=name, lease_id=lease_id, role=role, state="running", vcpus=vcpus, memory_mib=memory_mib,
                launched_at=launched_at, cpu_cores=cores, image="tiny")]).SerializeToString()
                for (name, lease_id, role, vcpus, memory_mib, launched_at), cores in zip(rows, used)])
            self.full.append(self.headers[-1] + b"".join(self.vms[-1]))

    def report(self, variant: int, omitted: int, seq: int, sent_at: float) -> bytes:
        if omitted < 0:
            return self.full[variant] + tail(seq, sent_at)
        vms = self.vms[variant]
        return b"".join((self.headers[variant], *vms[:omitted], *vms[omitted + 1:], tail(seq, sent_at)))


_DOUBLE = struct.Struct("<d")
_VERSION = controller_pb2.NodeReport(agent_version=__version__).SerializeToString()


def tail(seq: int, sent_at: float) -> bytes:
    """NodeReport fields 10 (seq, varint), 11 (sent_at, double) and 12 (agent_version), encoded."""
    out = bytearray(b"\x50")
    while seq > 0x7F:
        out.append((seq & 0x7F) | 0x80)
        seq >>= 7
    out.append(seq)
    out += b"\x59"
    out += _DOUBLE.pack(sent_at)
    out += _VERSION
    return bytes(out)


def send_reports(address: str, tls: TlsFiles, nodes: list[int], rows: list[list[VmRow]], agent_address: str,
                 seconds: float, streams: int, change_share: float, seq_base: int, go, results) -> None:
    """A client process: `streams` report streams, in turn over their nodes, for `seconds` after `go`.

    With change_share > 0 each report, with that chance, changes its node's VM list: it omits
    one of the node's backfill VMs (a different one each time) or, when one is omitted, shows
    it again. Puts ("ready",) once built and connected, then ("done", acknowledged, changes)."""
    parts = [NodeParts(n, node_rows, agent_address) for n, node_rows in zip(nodes, rows)]
    channels = [client_channel(address, tls) for _ in range(streams)]
    for channel in channels:
        grpc.channel_ready_future(channel).result(timeout=60)

    def one_stream(k: int) -> tuple[int, int]:
        mine = parts[k::streams]
        if not mine:
            return 0, 0
        count = len(mine)
        omitted = [-1] * count
        turn = [0] * count
        rng = random.Random(seq_base + k)
        changes = 0

        def produce():
            nonlocal changes
            i = 0
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                j = i % count
                node = mine[j]
                if change_share and node.backfill and rng.random() < change_share:
                    if omitted[j] < 0:
                        omitted[j] = node.backfill[turn[j] % len(node.backfill)]
                        turn[j] += 1
                    else:
                        omitted[j] = -1
                    changes += 1
                yield node.report((i // count) % REPORT_VARIANTS, omitted[j], seq_base + i, time.time())
                i += 1
        report = channels[k].stream_unary("/gleaner.controller.v1.Controller/Report", request_serializer=bytes,
                                          response_deserializer=controller_pb2.ReportAck.FromString)
        go.wait()
        acked = report(produce(), timeout=seconds + 120).reports
        return acked, changes
    results.put(("ready",))
    with futures.ThreadPoolExecutor(streams) as pool:
        done = list(pool.map(one_stream, range(streams)))
    for channel in channels:
        channel.close()
    results.put(("done", sum(a for a, _ in done), sum(c for _, c in done)))


def report_round(address: str, tls: TlsFiles, args: argparse.Namespace, agent_address: str,
                 rows: list[list[VmRow]], change_share: float, seq_base: int) -> tuple[int, float, int]:
    """One window of report streams from client processes: (reports acknowledged, seconds, list changes)."""
    context = multiprocessing.get_context("spawn")
    results, go = context.Queue(), context.Event()
    procs = []
    for k in range(args.report_processes):
        share = list(range(args.nodes))[k::args.report_processes]
        procs.append(context.Process(target=send_reports, args=(
            address, tls, share, [rows[n] for n in share], agent_address, args.report_seconds,
            args.streams_per_process, change_share, seq_base, go, results)))
    for p in procs:
        p.start()
    for _ in procs:
        if results.get(timeout=600)[0] != "ready":
            raise RuntimeError("a report client process finished before it was ready")
    started = time.perf_counter()
    go.set()
    done = [results.get(timeout=args.report_seconds + 300) for _ in procs]
    elapsed = time.perf_counter() - started
    for p in procs:
        p.join()
    return sum(d[1] for d in done), elapsed, sum(d[2] for d in done)


def settle(pool, rows: list[list[VmRow]], agent_address: str, seq: int) -> None:
    """Every node reports its full VM list once, in this process: the books as before a round."""
    for n, node_rows in enumerate(rows):
        pool.ingest(controller_pb2.NodeReport.FromString(NodeParts(n, node_rows, agent_address, 1).report(
            0, -1, seq, time.time())))


def count_match_calls(pool) -> list[int]:
    """Count the reports that go through _match_vms (a wrapper on this pool only); returns the counter."""
    counter = [0]
    match = pool._match_vms

    def counted(node, reported, now):
        counter[0] += 1
        return match(node, reported, now)
    pool._match_vms = counted
    return counter


def percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--vms-per-node", type=int, default=10)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--report-seconds", type=float, default=10.0)
    parser.add_argument("--report-processes", type=int, default=1)
    parser.add_argument("--streams-per-process", type=int, default=8)
    parser.add_argument("--report-rounds", type=int, default=3,
                        help="windows of --report-seconds in each mode (unchanged, mixed); the median counts")
    parser.add_argument("--change-share", type=float, default=0.1,
                        help="share of reports in the mixed rounds that change their node's VM list")
    args = parser.parse_args(argv)
    if not 0.0 < args.change_share <= 1.0:
        parser.error("--change-share must be within (0, 1]")
    if args.vms_per_node <= ON_DEMAND_PER_NODE:
        parser.error(f"--vms-per-node must be more than {ON_DEMAND_PER_NODE}: the backfill VMs are preempted")
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
    log_file = (work / "controller.log").open("a")
    logging.getLogger().handlers[0].setStream(log_file)  # the mixed rounds log every lost VM
    running = start_controller(config)
    pool = running.pool
    try:
        first = [controller_pb2.NodeReport.FromString(NodeParts(
            n, [vm_row(lease) for lease in node_leases(n, args.vms_per_node, now)], agent_address, 1).report(
            0, -1, 1, time.time())) for n in range(args.nodes)]
        started = time.perf_counter()
        for report in first:  # every node reports once, so it is up
            pool.ingest(report)
        registered_s = time.perf_counter() - started
        selection = []
        for _ in range(5):  # the first pass also brings every node's view up to date: steady state from here
            t0 = time.perf_counter()
            pool.select(evaluation=True)
            selection.append((time.perf_counter() - t0) * 1000)
            gc.freeze()  # as the controller's evaluation job does after each pass
        stub = controller_pb2_grpc.ControllerStub(client_channel(config.listen, pki["client"]))
        decisions, placements = [], []
        for i in range(args.requests):
            request_id = f"scale-{i}"
            t0 = time.perf_counter()
            place_on_demand(pool.snapshot(), Size(2, 2048), pool.backfill.termination_policy,
                            seed=hash(request_id) & 0xFFFF)  # the controller's seed for this request
            placements.append((time.perf_counter() - t0) * 1000)
            reply = stub.RequestVm(controller_pb2.VmRequest(vcpus=2, memory_mib=2048, image="tiny", owner="bench",
                                                            request_id=request_id), timeout=60)
            if reply.outcome != "placed" or not reply.preempted:
                raise SystemExit(f"request {i}: {reply.outcome} {reply.reason} (preempted {len(reply.preempted)})")
            decisions.append(reply.decision_ms)

        rows = booked_rows(pool, args.nodes)  # the agents now report the VMs the requests launched and stopped
        settle(pool, rows, agent_address, 2)
        matched = count_match_calls(pool)
        unchanged, mixed, matched_unchanged, matched_mixed, lost_after_settle = [], [], [], [], []
        events = {mode: dict.fromkeys(MIXED_EVENTS, 0) for mode in ("unchanged", "mixed")}

        def measured(mode: str, share: float, seq_base: int) -> tuple[tuple[int, float, int], int]:
            counts = {kind: pool.store.count_events(kind) for kind in MIXED_EVENTS}
            matched[0] = 0
            result = report_round(config.listen, pki["client"], args, agent_address, rows, share, seq_base)
            calls = matched[0]
            for kind in MIXED_EVENTS:
                events[mode][kind] += pool.store.count_events(kind) - counts[kind]
            return result, calls
        for r in range(args.report_rounds):
            seq_base = (3 * r + 1) * 10**9
            result, calls = measured("unchanged", 0.0, seq_base)
            unchanged.append(result)
            matched_unchanged.append(calls)
            result, calls = measured("mixed", args.change_share, seq_base + 10**9)
            mixed.append(result)
            matched_mixed.append(calls)
            settle(pool, rows, agent_address, seq_base + 2 * 10**9)
            with pool.lock:
                lost_after_settle.append(sum(lease.state == "lost" for lease in pool.leases.values()))
    finally:
        running.stop()
        stand_in.stop(0)
        log_file.flush()
    ordered, placed = sorted(decisions), sorted(placements)
    sent_mixed = sum(sent for sent, _, _ in mixed)
    print(json.dumps({
        "nodes": args.nodes, "vms": args.nodes * args.vms_per_node, "requests": len(decisions),
        "decision_p50_ms": round(statistics.median(ordered), 2),
        "decision_p99_ms": round(percentile(ordered, 0.99), 2),
        "decision_max_ms": round(ordered[-1], 2),
        "placement_p50_ms": round(statistics.median(placed), 2),
        "placement_p99_ms": round(percentile(placed, 0.99), 2),
        "selection_ms": round(statistics.median(selection), 1), "selection_first_ms": round(selection[0], 1),
        "reports_per_s": round(statistics.median(sent / elapsed for sent, elapsed, _ in unchanged)),
        "reports_per_s_rounds": [round(sent / elapsed) for sent, elapsed, _ in unchanged],
        "reports_per_s_mixed": round(statistics.median(sent / elapsed for sent, elapsed, _ in mixed)),
        "reports_per_s_mixed_rounds": [round(sent / elapsed) for sent, elapsed, _ in mixed],
        "change_share": args.change_share,
        "change_share_sent": round(sum(changes for _, _, changes in mixed) / max(sent_mixed, 1), 4),
        "matched_reports_rounds": matched_unchanged,
        "matched_reports_mixed_rounds": matched_mixed,
        "reports_mixed_rounds": [sent for sent, _, _ in mixed],
        "mixed_events": events["mixed"], "unchanged_events": events["unchanged"],
        "lost_after_settle": lost_after_settle,
        "report_streams": args.report_processes * args.streams_per_process,
        "seed_s": round(seeded_s, 1), "first_reports_s": round(registered_s, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
