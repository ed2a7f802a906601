"""The controller at scale: 10,000 nodes and 100,000 VMs, synthetic, in the real controller code.

    python -m tests.bench.controller_scale [--nodes 10000] [--vms-per-node 10] [--requests 200]
                                           [--report-seconds 10] [--report-rounds 3] [--change-share 0.1]
                                           [--report-nodes 64] [--report-processes 1]

This process runs the controller exactly as gleaner-controller does (start_controller: the
SQLite store, the pool, the gRPC server with mutual TLS and the authorization interceptor, the
periodic jobs), with the identities of a lab PKI (gleaner_common.pki.ensure_lab_pki in the
run's temporary directory): the controller serves with the controller certificate and its
deny list, RequestVm is sent with the admin certificate to the server named controller.gleaner,
and reports with agent certificates (below). The store is seeded with 100,000 leases (image
"tiny"); every node is full (14 vCPUs: 4 on-demand VMs of 2, 6 backfill VMs of 1), so each
on-demand request must choose a node and victims. Every report names the image "tiny" and
min_memory_mib 32, so every node can take the requests. The nodes' agent address points at a
stand-in NodeAgent in this process that answers launches and terminations at once: it stands
for 10,000 agents, each on its own hypervisor. It serves one agent certificate whose DNS names
include *.agent.gleaner, so the controller's check that the agent it dials is that node's
(the server certificate must name NODE.agent.gleaner) passes for every node id; a real pool has
one certificate per agent. The controller is what is measured. The controller's log (warning
level, as configured) goes to controller.log in the run's temporary directory.

What each figure times, and what it leaves out:

- decision_p50_ms / decision_p99_ms / decision_max_ms: RequestVm's decision_ms over --requests
  requests of 2 vCPUs sent through gRPC, one at a time: the whole booking under the pool's lock
  (controller/service.py), from when the request holds the lock (its replay lookup in the
  ledger and the store), through the ledger's decision (the snapshot, the image check, the
  placement, booking the new lease and its victims) and the commit of its rows and audit events
  in one transaction, to just before the lock is released. Left out: waiting for the lock (no
  reports flow during the requests), everything outside the lock (gRPC and its authorization,
  the stand-in agent's calls, waiting for the launch's answer).
- placement_p50_ms / placement_p99_ms: the snapshot plus placement alone, timed in this process
  right before each request by calling the ledger's snapshot() and policy.place_on_demand (the pure
  function, with the seed the controller uses for that request) outside gRPC and the store.
  That snapshot brings the views of the nodes the previous request changed up to date, so the
  request's own snapshot finds nothing to refresh (a few nodes: microseconds).
- selection_ms: one volunteer-selection pass over every node, each of which has reported a new
  foreground figure since the last pass, as between two evaluations (the reports are not timed;
  median of 4; the first pass, which also builds every node's view, is selection_first_ms).
- reports_per_s: agent reports the controller took in per second with unchanged VM lists, the
  median of --report-rounds windows (reports_per_s_rounds; this shared 2-core host is noisy).
  Each report goes through everything the controller does with a real agent's: the TLS
  connection, the authorization interceptor on every message (the caller's certificate is an
  agent's, not revoked, and the report's node_id is that certificate's node), the bounds checks
  (controller/checks.py report: every number within the node's, every name by the shared rules)
  and pool.ingest. Reports carry the fields nodeagent.reporter fills in (images ["tiny"],
  min_memory_mib 32 included), and each differs from the node's previous one: the node's load
  (foreground_cpu_cores, cpu_busy_cores, the residual CPU and memory) and each VM's cpu_cores
  cycle through REPORT_VARIANTS variants, and seq and sent_at are fresh in each report. The VM
  lists match the controller's books, so ingest takes its unchanged-list path and _match_vms
  does not run (matched_reports_rounds, reports that went through it, checks that).
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
  Both rates: a report stream may speak only for the node of its certificate, so the reports
  come from --report-nodes nodes (report_nodes, spread evenly over the node range), each with
  its own agent certificate (issued before the first round), its own channel (one TLS
  connection per node identity, as a real agent has) and one report stream, on which it sends
  its own reports back to back for the whole window; the streams are spread over
  --report-processes client processes. The clients stand in for agents on other machines, but
  share the 2 cores with the controller, so they are kept cheap: each report is put together
  from pre-serialized parts (the node's header and each VM, per variant) plus the encoded seq,
  sent_at, agent_version, images and min_memory_mib: the same bytes protobuf would write for
  the whole message. A window runs from when every client process is ready (reports built,
  every node's channel connected) until every stream's acknowledgement is back (the controller
  has ingested every report sent); client start-up is left out. Unchanged and mixed rounds
  alternate, so the host's noise falls on both alike. Before the first round every node reports
  its current VMs (the books after the requests) once in this process, so the controller has
  seen each list. The in-process reports (registration before the requests, the settling ones)
  call pool.ingest directly: no gRPC, authorization or checks. agent_certs_s is the time taken
  to issue the reporting nodes' certificates (in no figure).
  What differs from 10,000 real agents: there, each agent holds one stream and sends a report
  every few seconds; here report_nodes nodes send theirs as fast as the controller takes them,
  so the rate is the controller's capacity per report, with report_nodes streams and TLS
  connections open, not with 10,000. The controller serves each report stream on its own
  thread, so concurrent agents are capped at controller.max_agents (max_agents, set here to
  the larger of 64 and --report-nodes); a pool of 10,000 agents needs that many threads and
  connections, which this run does not open.
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
from unittest import mock

import grpc

from controller.cli import start_controller
from controller.config import ControllerConfig
from controller.core.records import stable_seed
from controller.core.policy import place_on_demand
from controller.core.records import Size
from controller.store import Lease, Store
from gleaner_common import __version__
from gleaner_common.config import TlsConfig
from gleaner_common.identity import Role
from gleaner_common.logs import setup_logging
from gleaner_common import pki
from gleaner_common.pki import TlsFiles, ensure_lab_pki
from gleaner_common.rpc import channel_to, server_credentials
from protos import agent_pb2, agent_pb2_grpc, controller_pb2, controller_pb2_grpc
from tests.agentproc import free_port

NODE_CPUS, NODE_MEMORY = 14, 65536  # exactly what the VMs below take: every node is full
ON_DEMAND_PER_NODE = 4  # 2 vCPUs each; the backfill VMs have 1 vCPU each
REPORT_VARIANTS = 4     # load figures per node, cycled, so a node's consecutive reports differ
IMAGES, MIN_MEMORY_MIB = ("tiny",), 32  # what every node's agent reports it can boot, and its smallest VM
STAND_IN = "stand-in"   # the stand-in agent's identity (agent/stand-in), serving *.agent.gleaner
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
        return [sorted(vm_row(lease) for lease in pool.ledger.by_node.get(node_id(n), {}).values()
                       if lease.state in ("running", "starting"))
                for n in range(nodes)]


class NodeParts:
    """One node's reports, pre-serialized per load variant: a header (fields 1-8) and each VM
    (field 9, one element each). A report is header + VMs + tail (seq, sent_at, agent_version,
    images, min_memory_mib: 10-14), the same bytes protobuf would write for the whole message,
    since it writes fields in order."""
    __slots__ = ("headers", "vms", "full", "backfill")

    def __init__(self, n: int, rows: list[VmRow], agent_address: str, variants: int = REPORT_VARIANTS) -> None:
        self.headers, self.vms, self.full = [], [], []
        self.backfill = [i for i, row in enumerate(rows) if row[2] == "backfill"]
        memory = sum(row[4] for row in rows)
        for variant in range(variants):
            rng = random.Random(n * REPORT_VARIANTS + variant)
            used = [round(rng.uniform(0.05, row[3]), 3) for row in rows]
            foreground = round(rng.uniform(0.0, 4.0), 3)
            busy = min(foreground + sum(used), NODE_CPUS)  # the controller refuses more than the node has
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
_FIXED = controller_pb2.NodeReport(agent_version=__version__, images=IMAGES,
                                   min_memory_mib=MIN_MEMORY_MIB).SerializeToString()


def tail(seq: int, sent_at: float) -> bytes:
    """NodeReport fields 10 (seq, varint), 11 (sent_at, double), then 12-14 (agent_version,
    images, min_memory_mib, the same in every report), encoded."""
    out = bytearray(b"\x50")
    while seq > 0x7F:
        out.append((seq & 0x7F) | 0x80)
        seq >>= 7
    out.append(seq)
    out += b"\x59"
    out += _DOUBLE.pack(sent_at)
    out += _FIXED
    return bytes(out)


def send_reports(address: str, nodes: list[tuple[int, TlsFiles, list[VmRow]]], agent_address: str,
                 seconds: float, change_share: float, seq_base: int, go, results) -> None:
    """A client process: one report stream per node, each on that node's own channel with that
    node's agent certificate, sending the node's reports back to back for `seconds` after `go`.

    With change_share > 0 each report, with that chance, changes its node's VM list: it omits
    one of the node's backfill VMs (a different one each time) or, when one is omitted, shows
    it again. Puts ("ready",) once built and connected, then ("done", acknowledged, changes);
    ("failed", why) instead when a channel or a stream fails."""
    try:
        parts = [NodeParts(n, node_rows, agent_address) for n, _, node_rows in nodes]
        channels = [channel_to(Role.CONTROLLER, "", address, tls) for _, tls, _ in nodes]
        for channel in channels:
            grpc.channel_ready_future(channel).result(timeout=60)
    except Exception as exc:  # noqa: BLE001 - said to the parent, which stops the run
        results.put(("failed", f"client set-up: {type(exc).__name__}: {exc}"))
        return

    def one_stream(k: int) -> tuple[int, int]:
        node = parts[k]
        omitted, turn, changes = -1, 0, 0
        rng = random.Random(seq_base + nodes[k][0])

        def produce():
            nonlocal omitted, turn, changes
            i = 0
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                if change_share and node.backfill and rng.random() < change_share:
                    if omitted < 0:
                        omitted = node.backfill[turn % len(node.backfill)]
                        turn += 1
                    else:
                        omitted = -1
                    changes += 1
                yield node.report(i % REPORT_VARIANTS, omitted, seq_base + i, time.time())
                i += 1
        report = channels[k].stream_unary("/gleaner.controller.v1.Controller/Report", request_serializer=bytes,
                                          response_deserializer=controller_pb2.ReportAck.FromString)
        go.wait()
        acked = report(produce(), timeout=seconds + 120).reports
        return acked, changes
    results.put(("ready",))
    try:
        with futures.ThreadPoolExecutor(len(nodes)) as pool:
            done = list(pool.map(one_stream, range(len(nodes))))
    except grpc.RpcError as exc:
        results.put(("failed", f"report stream: {exc.code().name}: {exc.details()}"))
        return
    finally:
        for channel in channels:
            channel.close()
    results.put(("done", sum(a for a, _ in done), sum(c for _, c in done)))


def report_round(address: str, certs: dict[int, TlsFiles], args: argparse.Namespace, agent_address: str,
                 rows: list[list[VmRow]], change_share: float, seq_base: int) -> tuple[int, float, int]:
    """One window of report streams (one per reporting node) from client processes:
    (reports acknowledged, seconds, list changes)."""
    context = multiprocessing.get_context("spawn")
    results, go = context.Queue(), context.Event()
    procs = []
    reporting = sorted(certs)
    for k in range(args.report_processes):
        share = reporting[k::args.report_processes]
        procs.append(context.Process(target=send_reports, args=(
            address, [(n, certs[n], rows[n]) for n in share], agent_address, args.report_seconds,
            change_share, seq_base, go, results)))
    for p in procs:
        p.start()
    try:
        for _ in procs:
            message = results.get(timeout=600)
            if message[0] != "ready":
                raise RuntimeError(f"a report client process failed before the window: {message[-1]}")
        started = time.perf_counter()
        go.set()
        done = [results.get(timeout=args.report_seconds + 300) for _ in procs]
        elapsed = time.perf_counter() - started
        failed = [d[1] for d in done if d[0] != "done"]
        if failed:
            raise RuntimeError(f"a report client process failed: {failed[0]}")
    finally:
        go.set()
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    return sum(d[1] for d in done), elapsed, sum(d[2] for d in done)


def settle(pool, rows: list[list[VmRow]], agent_address: str, seq: int) -> None:
    """Every node reports its full VM list once, in this process: the books as before a round."""
    for n, node_rows in enumerate(rows):
        pool.ingest(controller_pb2.NodeReport.FromString(NodeParts(n, node_rows, agent_address, 1).report(
            0, -1, seq, time.time())))


def count_match_calls(pool) -> list[int]:
    """Count the reports that go through the ledger's _match_vms (a wrapper on this pool only)."""
    counter = [0]
    match = pool.ledger._match_vms

    def counted(*args, **kwargs):   # whatever the ledger passes it
        counter[0] += 1
        return match(*args, **kwargs)
    pool.ledger._match_vms = counted
    return counter


def percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--vms-per-node", type=int, default=10)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--report-seconds", type=float, default=10.0)
    parser.add_argument("--report-nodes", type=int, default=64,
                        help="nodes that report over gRPC in the rounds, each with its own certificate, "
                             "channel and stream")
    parser.add_argument("--report-processes", type=int, default=1,
                        help="client processes the reporting nodes' streams are spread over")
    parser.add_argument("--report-rounds", type=int, default=3,
                        help="windows of --report-seconds in each mode (unchanged, mixed); the median counts")
    parser.add_argument("--change-share", type=float, default=0.1,
                        help="share of reports in the mixed rounds that change their node's VM list")
    args = parser.parse_args(argv)
    if not 0.0 < args.change_share <= 1.0:
        parser.error("--change-share must be within (0, 1]")
    if not 1 <= args.report_nodes <= args.nodes:
        parser.error("--report-nodes must be within 1..--nodes")
    if not 1 <= args.report_processes <= args.report_nodes:
        parser.error("--report-processes must be within 1..--report-nodes")
    if args.vms_per_node <= ON_DEMAND_PER_NODE:
        parser.error(f"--vms-per-node must be more than {ON_DEMAND_PER_NODE}: the backfill VMs are preempted")
    work = Path(tempfile.mkdtemp(prefix="gleaner-scale-"))
    lab = ensure_lab_pki(work / "pki")
    tls = TlsConfig(ca=lab.controller.ca, cert=lab.controller.cert, key=lab.controller.key, deny_list=lab.deny_list)
    # One certificate for the stand-in of every agent: *.agent.gleaner matches each NODE.agent.gleaner.
    # The PKI refuses such a name (one certificate serving as every node is the attack it exists to
    # prevent), so the benchmark lifts that check for its own stand-in only.
    with mock.patch.object(pki, "check_hosts", lambda hosts: hosts):
        stand_in_tls = pki.issue(lab.directory, Role.AGENT, STAND_IN, hosts=("*.agent.gleaner", "127.0.0.1"))

    stand_in = grpc.server(futures.ThreadPoolExecutor(8))
    agent_pb2_grpc.add_NodeAgentServicer_to_server(StandInAgent(), stand_in)
    agent_port = stand_in.add_secure_port("127.0.0.1:0", server_credentials(stand_in_tls))
    stand_in.start()
    agent_address = f"127.0.0.1:{agent_port}"

    config = ControllerConfig(listen=f"127.0.0.1:{free_port()}", state_dir=work / "controller", log_level="warning",
                              tls=tls, suspect_after_seconds=600, down_after_seconds=1200,
                              selection_interval_seconds=3600, max_agents=max(64, args.report_nodes),
                              # each stand-in node reports as fast as it can, not every 2 s: the
                              # per-node budget (controller/intake.py) would drop most of that
                              reports_per_minute=600_000, report_burst=100_000, report_mib_per_minute=65536,
                              metrics_listen="127.0.0.1:0")   # as in production, on a port of its own
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
        for round_ in range(5):  # the first pass also brings every node's view up to date
            if round_:  # as between two evaluations: every node has reported a new foreground figure since
                for report in first:
                    report.seq += 1
                    report.foreground_cpu_cores = round(report.foreground_cpu_cores * (0.5 if round_ % 2 else 2), 3)
                    pool.ingest(report)
            t0 = time.perf_counter()
            pool.select(evaluation=True)
            selection.append((time.perf_counter() - t0) * 1000)
            gc.freeze()  # as the controller's evaluation job does after each pass
        admin = channel_to(Role.CONTROLLER, "", config.listen, lab.admin)
        stub = controller_pb2_grpc.ControllerStub(admin)
        decisions, placements = [], []
        for i in range(args.requests):
            request_id = f"scale-{i}"
            t0 = time.perf_counter()
            with pool.lock:
                place_on_demand(pool.ledger.snapshot(time.time()), Size(2, 2048), pool.backfill.termination_policy,
                                seed=stable_seed(request_id))  # the controller's seed for this request
            placements.append((time.perf_counter() - t0) * 1000)
            reply = stub.RequestVm(controller_pb2.VmRequest(vcpus=2, memory_mib=2048, image="tiny", owner="bench",
                                                            request_id=request_id), timeout=60)
            if reply.outcome != "placed" or not reply.preempted:
                raise SystemExit(f"request {i}: {reply.outcome} {reply.reason} (preempted {len(reply.preempted)})")
            decisions.append(reply.decision_ms)

        admin.close()
        rows = booked_rows(pool, args.nodes)  # the agents now report the VMs the requests launched and stopped
        settle(pool, rows, agent_address, 2)
        reporting = [k * args.nodes // args.report_nodes for k in range(args.report_nodes)]
        started = time.perf_counter()
        certs = {n: lab.agent(node_id(n)) for n in reporting}  # one agent identity per reporting node
        certs_s = time.perf_counter() - started
        matched = count_match_calls(pool)
        unchanged, mixed, matched_unchanged, matched_mixed, lost_after_settle = [], [], [], [], []
        events = {mode: dict.fromkeys(MIXED_EVENTS, 0) for mode in ("unchanged", "mixed")}

        def measured(mode: str, share: float, seq_base: int) -> tuple[tuple[int, float, int], int]:
            counts = {kind: pool.store.count_events(kind) for kind in MIXED_EVENTS}
            matched[0] = 0
            result = report_round(config.listen, certs, args, agent_address, rows, share, seq_base)
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
                lost_after_settle.append(sum(lease.state == "lost" for lease in pool.ledger.leases.values()))
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
        "selection_ms": round(statistics.median(selection[1:]), 1), "selection_first_ms": round(selection[0], 1),
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
        "report_nodes": args.report_nodes, "report_streams": args.report_nodes,
        "report_processes": args.report_processes, "max_agents": config.max_agents,
        "seed_s": round(seeded_s, 1), "first_reports_s": round(registered_s, 1),
        "agent_certs_s": round(certs_s, 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
