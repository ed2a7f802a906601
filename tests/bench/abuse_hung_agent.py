"""Abuse, hung agent: one node's agent accepts every call and never answers, while backfill
launches queue for it; do the healthy nodes' on-demand VMs still start at once?

    python -m tests.bench.abuse --hung-agent [--rounds 8] [--requests 50] [--no-bulkheads]

A real controller process and two real agent processes on libvirt's test:/// driver (the
healthy nodes: on-demand VMs start at once, so the figures are the controller's dispatch, not
QEMU's), all with mutual TLS. The healthy nodes carry whole-node reserves (no backfill), and
alone offer the image the requests ask for ("tiny2", the tiny bundle linked again), so every
on-demand VM goes to one of them. Backfill is on (1 vCPU, 128 MiB of image tiny).

Phases alternate, clean then hung, --rounds times (at least 3 of each):
- hung: a new node `hungN` joins. Its agent (tests.fake_agents, a real gRPC server with the lab
  PKI's certificate for hungN) accepts LaunchDomain and TerminateDomain and never answers; this
  process reports for it every 0.5 s over a real Report stream, with 128 idle CPUs, so the
  launcher plans backfill there and the launches hang. Once the hung agent holds calls in flight
  and the controller shows the node's backfill leases starting (16, the lane's backlog; 128
  with --no-bulkheads), the admin's requests start. At the end of the phase the hung agent is
  stopped (its calls then fail at once), its reports stop, and the next phase starts once the
  node has no starting lease and is down.
- clean: no hung node in the pool; the same requests.

What is timed: each on-demand request, by the admin's client (one channel, its TLS connection
made before by an untimed Status), with time.perf_counter from just before RequestVm (1 vCPU,
128 MiB, image tiny2) until it returns. RequestVm returns once the controller has the agent's
answer to LaunchDomain (the lease running: the VM started), so this is the start time a user
waits for. A request that does not return placed within --request-timeout counts as an error,
with the time it took (the timeout, at most). Not timed: the Release (force) after each
request, phase set-up and tear-down.

bulkhead_ratio = p99 of the hung phases' samples / p99 of the clean phases' samples, each
pooled over every round (percentile by nearest rank). Goal: at most 1.1, and no error; the
command exits 1 otherwise. --no-bulkheads runs the controller with the dispatch before the
bulkheads (tests.bench.shared_pool_controller: one shared 32-thread pool, no lane room in the
fill) to show what the bulkheads mend; use a short --request-timeout and few --requests then,
since each request there waits out hung calls. Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

import grpc

from gleaner_common.identity import Role
from gleaner_common.rpc import channel_to
from protos import controller_pb2, controller_pb2_grpc
from tests.agentproc import SYSTEM_IMAGE_DIR, AgentProcess, LabEnv, exit_cleanly_on_sigterm, link_image, wait_for
from tests.bench.abuse import percentile
from tests.controllerproc import ControllerProcess, agent_settings
from tests.fake_agents import serve_fake_agent, stop_fake_agent

GOAL = 1.1
HEALTHY = ("bulk-ok1", "bulk-ok2")
HUNG_CPUS = 128
LANE_BACKLOG = 16   # the controller's default agent_backfill_backlog


class SharedPoolController(ControllerProcess):
    module = "tests.bench.shared_pool_controller"


class HungNode:
    """A node whose agent never answers, reporting for itself every 0.5 s while it lives."""

    def __init__(self, env: LabEnv, controller: ControllerProcess, name: str) -> None:
        self.name, self.controller = name, controller
        self.agent, self.server = serve_fake_agent(env.pki, name, hung=True)
        self.stopped = threading.Event()
        channel = channel_to(Role.CONTROLLER, "", controller.address, env.pki.agent(name))
        self.channel = channel
        self.stream = controller_pb2_grpc.ControllerStub(channel).Report.future(self._reports(), timeout=3600)

    def _reports(self):
        while not self.stopped.is_set():
            yield controller_pb2.NodeReport(node_id=self.name, agent_address=f"127.0.0.1:{self.server.port}",
                                            cpus=HUNG_CPUS, memory_mib=HUNG_CPUS * 1024, images=["tiny"],
                                            min_memory_mib=32, residual_cpu_cores=float(HUNG_CPUS),
                                            residual_memory_mib=HUNG_CPUS * 1024, sent_at=time.time())
            self.stopped.wait(0.5)

    def stop(self) -> None:
        self.stopped.set()
        stop_fake_agent(self.agent, self.server)
        try:
            self.stream.result(timeout=10)
        except (grpc.RpcError, grpc.FutureTimeoutError):
            self.stream.cancel()
        self.channel.close()


def starting_on(controller: ControllerProcess, node: str) -> int:
    return sum(1 for l in controller.leases("backfill", "starting") if l.node_id == node)


def hung_phase_ready(controller: ControllerProcess, node: HungNode, backlog: int) -> bool:
    return node.agent.calls.in_flight >= 3 and starting_on(controller, node.name) >= backlog


def requests(stub, label: str, count: int, timeout: float) -> tuple[list[float], int]:
    """`count` on-demand requests, one at a time, each released after (untimed): (ms each, errors)."""
    samples, errors = [], 0
    for i in range(count):
        request = controller_pb2.VmRequest(vcpus=1, memory_mib=128, image="tiny2", owner="bench",
                                           request_id=f"bulk-{label}-{i}")
        started = time.perf_counter()
        try:
            reply = stub.RequestVm(request, timeout=timeout)
        except grpc.RpcError as exc:
            reply = None
            print(f"request {request.request_id}: {exc.code().name}", file=sys.stderr)
        samples.append((time.perf_counter() - started) * 1000)
        if reply is None or reply.outcome != "placed":
            errors += 1
            if reply is not None:
                print(f"request {request.request_id}: {reply.outcome}: {reply.reason}", file=sys.stderr)
            continue
        stub.Release(controller_pb2.ReleaseRequest(lease_id=reply.lease.lease_id, force=True), timeout=30)
    return samples, errors


def release_all_on_demand(controller: ControllerProcess, stub) -> None:
    """Requests that timed out may have been placed since: their VMs go, so the next phase has room."""
    for lease in controller.leases("on_demand"):
        if lease.state in ("running", "starting", "waiting"):
            try:
                stub.Release(controller_pb2.ReleaseRequest(lease_id=lease.lease_id, force=True), timeout=30)
            except grpc.RpcError:
                pass


def run(args: argparse.Namespace) -> dict:
    env = LabEnv.create()
    link_image(SYSTEM_IMAGE_DIR / "tiny", env.image_dir / "tiny2")
    kind = SharedPoolController if args.no_bulkheads else ControllerProcess
    # a node that joins is selected for backfill at the next evaluation: every second here
    controller = kind(env, name="bulk-ctl", settings=dict(use_prediction=False, log_level="info",
                                                          agent_timeout_seconds=args.agent_timeout,
                                                          selection_interval_seconds=1.0))
    controller.start()
    agents = [AgentProcess(env, name=n, settings=agent_settings(controller, libvirt_uri="test:///default",
                                                               metrics_listen="", log_level="info"))
              for n in HEALTHY]
    samples: dict[str, list[float]] = {"clean": [], "hung": []}
    errors = {"clean": 0, "hung": 0}
    hung_in_flight, hung_starting = [], []
    try:
        for agent in agents:
            agent.start()
        stub = controller.stub()
        for node in HEALTHY:
            wait_for(lambda: controller.node_state(node) == "up", 30, f"{node} to report")
            stub.SetReserve(controller_pb2.Reserve(node_id=node, whole_node=True), timeout=10)
        stub.SetBackfill(controller_pb2.SetBackfillRequest(enabled=True, memory_mb=128, vcpus=1, image="tiny"),
                         timeout=10)
        stub.Status(controller_pb2.StatusRequest(), timeout=10)   # untimed: the channel's TLS connection
        requests(stub, "warm", 5, args.request_timeout)            # untimed: first calls of each path
        backlog = HUNG_CPUS if args.no_bulkheads else LANE_BACKLOG
        for round_ in range(args.rounds):
            got, bad = requests(stub, f"clean{round_}", args.requests, args.request_timeout)
            samples["clean"] += got
            errors["clean"] += bad
            node = HungNode(env, controller, f"hung{round_}")
            try:
                wait_for(lambda: hung_phase_ready(controller, node, backlog), 60,
                         f"backfill launches hanging on {node.name}", interval=0.2)
                got, bad = requests(stub, f"hung{round_}", args.requests, args.request_timeout)
                samples["hung"] += got
                errors["hung"] += bad
                hung_in_flight.append(node.agent.calls.most_in_flight)
                hung_starting.append(starting_on(controller, node.name))
            finally:
                node.stop()
            release_all_on_demand(controller, stub)
            wait_for(lambda: starting_on(controller, node.name) == 0 and controller.node_state(node.name) == "down",
                     120, f"{node.name}'s launches to end and the node to go down", interval=0.2)
    finally:
        for agent in agents:
            agent.stop()
        controller.stop()
        env.remove()
    clean_p99, hung_p99 = percentile(samples["clean"], 99), percentile(samples["hung"], 99)
    ratio = hung_p99 / clean_p99
    if args.samples:   # every sample, in order, for a closer look at the tails
        args.samples.write_text(json.dumps(samples))
    return {
        "dispatch": "shared_pool" if args.no_bulkheads else "bulkheads",
        "rounds": args.rounds, "requests_per_phase": args.requests, "request_timeout_s": args.request_timeout,
        "agent_timeout_s": args.agent_timeout,
        "clean_samples": len(samples["clean"]), "hung_samples": len(samples["hung"]),
        "clean_p50_ms": round(statistics.median(samples["clean"]), 2),
        "clean_p90_ms": round(percentile(samples["clean"], 90), 2), "clean_p99_ms": round(clean_p99, 2),
        "clean_max_ms": round(max(samples["clean"]), 2),
        "hung_p50_ms": round(statistics.median(samples["hung"]), 2),
        "hung_p90_ms": round(percentile(samples["hung"], 90), 2), "hung_p99_ms": round(hung_p99, 2),
        "hung_max_ms": round(max(samples["hung"]), 2),
        "bulkhead_ratio": round(ratio, 3), "goal": GOAL,
        "clean_errors": errors["clean"], "hung_errors": errors["hung"],
        "hung_agent_calls_in_flight_max": hung_in_flight, "hung_node_backfill_starting": hung_starting,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.abuse --hung-agent",
                                     description=__doc__.splitlines()[0])
    # many short phases: a burst of the host's other work lands in both kinds alike
    parser.add_argument("--rounds", type=int, default=8, help="clean and hung phases, alternated (at least 3)")
    parser.add_argument("--requests", type=int, default=50, help="on-demand requests per phase")
    parser.add_argument("--request-timeout", type=float, default=30.0, help="the admin's deadline per request (s)")
    parser.add_argument("--agent-timeout", type=float, default=30.0, help="the controller's agent_timeout_seconds")
    parser.add_argument("--no-bulkheads", action="store_true",
                        help="the dispatch before the bulkheads: one shared 32-thread pool")
    parser.add_argument("--samples", type=Path, help="also write every sample (ms, by phase kind) to this JSON file")
    args = parser.parse_args(argv)
    if args.rounds < 3 or args.requests < 1:
        parser.error("--rounds must be 3 or more and --requests 1 or more")
    exit_cleanly_on_sigterm()
    figures = run(args)
    print(json.dumps(figures))
    ok = figures["bulkhead_ratio"] <= GOAL and not figures["clean_errors"] and not figures["hung_errors"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
