"""Abuse, report flood: one agent certificate floods its own node's reports while honest nodes
report and an admin works.

    python -m tests.bench.abuse --report-flood [--seconds 15] [--phases 3]

A real controller process (default report budget and adoption caps) and a real agent process
(on libvirt's test:/// driver, so on-demand VMs start at once) run with mutual TLS. Beside them:

- the flooder (its own process): one agent certificate, reporting for its own node. In flood
  phases it sends reports as fast as its stream takes them, each listing 4,096 VMs (the most a
  report may list) under fresh names, with the largest sizes the node it describes allows; when
  the controller ends its stream it opens another at once, and keeps trying. In quiet phases it
  sends nothing.
- honest nodes (their own process): four agent certificates, each reporting for its node every
  2 s on its own stream, as an agent does.
- the admin (this process): one call at a time, reads (Status, ListVms, ListNodes) and every
  fourth round an on-demand request of 1 vCPU, then its Release (tests/bench/abuse.py's
  admin_work), for the whole run.
- a watcher (this process, its own channel): every 0.5 s, ListNodes; any honest node (the four
  and the real agent's) seen in another state than up counts in honest_nodes_suspect.

Phases alternate, flood first: flood, quiet, flood, quiet, ... (--phases of each, --seconds each).

What is timed: each admin call, by the admin's client, with time.perf_counter from just before
the stub call until it returns; a call belongs to the phase in which it started. p99 is over all
the calls of all flood phases, and over all the calls of all quiet phases.

Printed (one JSON object): legit_calls, legit_errors, legit_p99_flood_ms, legit_p99_quiet_ms,
legit_p99_ratio (flood over quiet), legit_max_ms, honest_nodes_suspect, flood_reports_sent,
flood_streams_ended (RESOURCE_EXHAUSTED), flood_unavailable (calls the controller did not
answer), lease_rows_added (the store's lease rows of the flood node, read after the run),
lease_rows_allowed (what the adoption caps allow over the run), controller_cpu_percent.
Goals (exit 1 when one breaks): legit_errors 0, legit_p99_ratio at most 1.5,
honest_nodes_suspect 0, lease_rows_added at most lease_rows_allowed.
"""
from __future__ import annotations

import itertools
import json
import math
import multiprocessing
import sqlite3
import sys
import threading
import time
from pathlib import Path

import grpc
import psutil

from controller.config import ControllerConfig
from gleaner_common.pki import TlsFiles
from gleaner_common.rpc import channel_to
from gleaner_common.identity import Role
from protos import controller_pb2, controller_pb2_grpc
from tests.agentproc import AgentProcess, LabEnv, exit_cleanly_on_sigterm, wait_for
from tests.bench.abuse import NODE, admin_work, percentile
from tests.controllerproc import ControllerProcess, agent_settings

FLOOD_NODE = "flood-node"
HONEST = [f"honest-{i}" for i in range(4)]
MAX_VMS, NODE_CPUS, NODE_MIB = 4096, 4096, 64 * 2**20   # controller/checks.py's bounds


def flood_reports(serial: itertools.count, flooding):
    """Reports of 4,096 fresh VM names each, while `flooding` is set."""
    while flooding.is_set():
        first = next(serial) * MAX_VMS
        yield controller_pb2.NodeReport(
            node_id=FLOOD_NODE, agent_address="127.0.0.1:1", cpus=NODE_CPUS, memory_mib=NODE_MIB,
            min_memory_mib=32,   # no image: the admin's VMs go to the real agent, which has one
            vms=[controller_pb2.ReportedVm(name=f"flood-{first + i}", role="backfill", vcpus=NODE_CPUS,
                                           memory_mib=NODE_MIB, state="running", image="tiny")
                 for i in range(MAX_VMS)])


def flooder(address: str, tls: tuple, flooding, done, results) -> None:
    """The flooder's process: a stream of flood reports in flood phases, reopened when ended."""
    files = TlsFiles(*map(Path, tls))
    counts = {"sent": 0, "ended": 0, "unavailable": 0}
    serial = itertools.count()

    def counted():
        for report in flood_reports(serial, flooding):
            counts["sent"] += 1
            yield report

    with channel_to(Role.CONTROLLER, "", address, files) as channel:
        stub = controller_pb2_grpc.ControllerStub(channel)
        while not done.is_set():
            if not flooding.wait(timeout=0.2):
                continue
            try:
                stub.Report(counted(), timeout=120)
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    counts["ended"] += 1
                elif exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    counts["unavailable"] += 1
    results.put(counts)


def honest_nodes(address: str, certs: dict[str, tuple], done, results) -> None:
    """Each honest node reports every 2 s on its own stream, as an agent does."""
    errors = []

    def one(node: str) -> None:
        def every_two_seconds():
            while not done.is_set():
                yield controller_pb2.NodeReport(node_id=node, agent_address="127.0.0.1:1", cpus=4, memory_mib=8192,
                                                min_memory_mib=32)   # no image: nothing placed here
                done.wait(2.0)
        with channel_to(Role.CONTROLLER, "", address, TlsFiles(*map(Path, certs[node]))) as channel:
            try:
                controller_pb2_grpc.ControllerStub(channel).Report(every_two_seconds(), timeout=3600)
            except grpc.RpcError as exc:
                errors.append(f"{node}: {exc.code().name}: {exc.details()}")

    threads = [threading.Thread(target=one, args=(node,)) for node in certs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results.put(errors)


def watch(controller: ControllerProcess, stop: threading.Event, suspect: list[str]) -> None:
    with controller.channel(controller.env.pki.viewer) as channel:
        stub = controller_pb2_grpc.ControllerStub(channel)
        while not stop.wait(0.5):
            for node in stub.ListNodes(controller_pb2.ListNodesRequest(), timeout=30).nodes:
                if node.node_id in (*HONEST, NODE) and node.state != "up":
                    suspect.append(f"{node.node_id} {node.state} ({node.last_report_age_seconds:.1f} s)")


def lease_rows(store: Path, node: str) -> int:
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        return db.execute("SELECT count(*) FROM leases WHERE node_id = ?", (node,)).fetchone()[0]


def run_flood(seconds: float, phases: int) -> int:
    exit_cleanly_on_sigterm()
    env = LabEnv.create()
    controller = ControllerProcess(env, name="flood-ctl", settings=dict(use_prediction=False, log_level="info"))
    controller.start()
    agent = AgentProcess(env, name=NODE, settings=agent_settings(controller, libvirt_uri="test:///default",
                                                                 metrics_listen="", log_level="info"))
    agent.start()
    context = multiprocessing.get_context("spawn")
    flooding, done, results = context.Event(), context.Event(), context.Queue()
    as_args = lambda files: (str(files.ca), str(files.cert), str(files.key))   # noqa: E731
    try:
        wait_for(lambda: controller.node_state(NODE) == "up", 30, "the node to report")
        procs = [context.Process(target=flooder, args=(controller.address, as_args(env.pki.agent(FLOOD_NODE)),
                                                       flooding, done, results)),
                 context.Process(target=honest_nodes, args=(controller.address, {
                     n: as_args(env.pki.agent(n)) for n in HONEST}, done, results))]
        for p in procs:
            p.start()
        wait_for(lambda: all(controller.node_state(n) == "up" for n in HONEST), 30, "the honest nodes to report")
        process = psutil.Process(controller.process.pid)
        cpu_before, cpu_started = process.cpu_times(), time.monotonic()
        stop_watch, suspect = threading.Event(), []
        watcher = threading.Thread(target=watch, args=(controller, stop_watch, suspect))
        watcher.start()
        windows: list[tuple[str, float, float]] = []

        def alternate() -> None:
            for phase in itertools.islice(itertools.cycle(("flood", "quiet")), 2 * phases):
                (flooding.set if phase == "flood" else flooding.clear)()
                started = time.monotonic()
                time.sleep(seconds)
                windows.append((phase, started, time.monotonic()))
            flooding.clear()

        switcher = threading.Thread(target=alternate)
        switcher.start()
        stamps: list[float] = []
        latencies, errors, placed = admin_work(controller, 2 * phases * seconds, stamps)
        switcher.join()
        stop_watch.set()
        watcher.join()
        done.set()
        outcomes = [results.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(30)
        cpu_after, cpu_window = process.cpu_times(), time.monotonic() - cpu_started
    finally:
        done.set()
        agent.stop()
        controller.stop()
    rows = lease_rows(controller.state_dir / "controller.sqlite3", FLOOD_NODE)
    env.remove()
    counts = next(o for o in outcomes if isinstance(o, dict))
    honest_errors = next(o for o in outcomes if isinstance(o, list))
    by_phase = {"flood": [], "quiet": []}
    for stamp, ms in zip(stamps, latencies):
        phase = next((p for p, a, b in windows if a <= stamp < b), None)
        if phase:
            by_phase[phase].append(ms)
    config = ControllerConfig()
    allowed = config.adoptions_per_hour + math.ceil(config.adoptions_per_hour * cpu_window / 3600)
    p99 = {phase: percentile(values, 99) for phase, values in by_phase.items()}
    figures = {
        "phases": phases, "phase_seconds": seconds, "legit_calls": len(latencies),
        "legit_calls_flood": len(by_phase["flood"]), "legit_calls_quiet": len(by_phase["quiet"]),
        "legit_errors": errors, "legit_requests": placed,
        "legit_p99_flood_ms": round(p99["flood"], 2), "legit_p99_quiet_ms": round(p99["quiet"], 2),
        "legit_p99_ratio": round(p99["flood"] / p99["quiet"], 3), "legit_max_ms": round(max(latencies), 2),
        "honest_nodes_suspect": len(suspect), "honest_stream_errors": honest_errors,
        "flood_reports_sent": counts["sent"], "flood_streams_ended": counts["ended"],
        "flood_unavailable": counts["unavailable"], "lease_rows_added": rows, "lease_rows_allowed": allowed,
        "controller_cpu_percent": round((cpu_after.user + cpu_after.system - cpu_before.user - cpu_before.system)
                                        / cpu_window * 100, 1)}
    print(json.dumps(figures))
    for line in suspect[:10]:
        print(f"suspect: {line}", file=sys.stderr)
    broken = [goal for goal, ok in (
        ("legit_errors 0", errors == 0), ("legit_p99_ratio <= 1.5", figures["legit_p99_ratio"] <= 1.5),
        ("honest_nodes_suspect 0", not suspect and not honest_errors),
        ("lease_rows_added <= lease_rows_allowed", rows <= allowed)) if not ok]
    if broken:
        print(f"goals broken: {', '.join(broken)}", file=sys.stderr)
        return 1
    return 0
