"""A live pool that records itself, for the replay bench (tests/bench/replay.py) and its
integration test: a real controller process (mutual TLS, [record] on) and real agent processes
on libvirt's test:/// driver (an in-process fake hypervisor, so no QEMU and no domain of the
local libvirtd: real processes, real gRPC, real timing, VMs that start and stop at once), backfill
on, and a request script played against it in real time: on-demand requests at set times, each
released (without force, as `gleanctl release`) a set time after it was placed.

The script's two request sizes are worked out from the nodes' size so that both preemption paths
happen on a pool full of backfill: a small request whose memory fits beside its victims (instant
path) and a large one that needs some victims' memory (after_victims path). Releases free room
that backfill takes again (refills).
"""
from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from controller.config import ControllerConfig
from protos import controller_pb2
from tests.agentproc import AgentProcess, LabEnv, wait_for
from tests.controllerproc import ControllerProcess, agent_settings

BACKFILL_VCPUS, BACKFILL_MIB = 1, 1024
HEADROOM_MIB = ControllerConfig().host_headroom_mib


@dataclass(frozen=True)
class ScriptRequest:
    at: float          # seconds after the script starts
    request_id: str
    vcpus: int
    memory_mib: int
    hold: float        # seconds from its answer (placed) to its release


@dataclass(frozen=True)
class Sizes:
    small: tuple[int, int]    # (vCPUs, MiB): its memory fits beside its victims (instant path)
    large: tuple[int, int]    # ... needs some victims' memory (after_victims path)


def sizes_for(node_cpus: int, node_memory_mib: int) -> Sizes:
    """Request sizes for nodes full of backfill VMs of BACKFILL_VCPUS x BACKFILL_MIB."""
    per_node = node_cpus // BACKFILL_VCPUS
    free = node_memory_mib - per_node * BACKFILL_MIB - HEADROOM_MIB   # beside a full node's backfill
    if free < 2 * BACKFILL_MIB:
        raise ValueError(f"nodes of {node_cpus} CPUs and {node_memory_mib} MiB full of backfill leave {free} MiB: "
                         f"too little for an instant-path request")
    return Sizes(small=(2, 512), large=(min(4, node_cpus), free + BACKFILL_MIB // 2))


def make_script(seed: int, seconds: float, every: float, sizes: Sizes, hold: tuple[float, float],
                large_share: float = 0.4) -> list[ScriptRequest]:
    """Requests arriving every `every` seconds on average (exponential gaps, seeded), the last
    one early enough to be released within `seconds`."""
    rng = random.Random(seed)
    script, at, n = [], rng.expovariate(1 / every), 0
    while at + hold[1] < seconds:
        n += 1
        vcpus, memory = sizes.large if rng.random() < large_share else sizes.small
        script.append(ScriptRequest(round(at, 3), f"rp-{seed}-{n:03d}", vcpus, memory,
                                    round(rng.uniform(*hold), 3)))
        at += rng.expovariate(1 / every)
    return script


@dataclass
class LivePool:
    env: LabEnv
    nodes: int
    name: str = "replay"
    report_seconds: float = 0.5
    settings: dict = field(default_factory=dict)   # further controller settings
    controller: ControllerProcess | None = None
    agents: list[AgentProcess] = field(default_factory=list)

    @property
    def recording(self) -> Path:
        return self.env.root / f"{self.name}-ctl" / "record.jsonl"

    def start(self) -> LivePool:
        # churn_burst above the pool's size: the nodes joining at the start do not defer the first
        # selection (and so backfill) to the end of the first evaluation interval
        settings = dict(use_prediction=False, record_path=self.recording, agent_backfill_backlog=64,
                        churn_burst=max(ControllerConfig().churn_burst, 2 * self.nodes), **self.settings)
        self.controller = ControllerProcess(self.env, name=f"{self.name}-ctl", settings=settings).start()
        width = len(str(self.nodes - 1))
        self.agents = [AgentProcess(self.env, name=f"{self.name}{i:0{width}d}", settings={
            **agent_settings(self.controller, libvirt_uri="test:///default", metrics_listen=""),
            "controller_report_seconds": self.report_seconds}) for i in range(self.nodes)]
        for agent in self.agents:
            agent.start()
        for agent in self.agents:
            wait_for(lambda: self.controller.node_state(agent.name) == "up", 30, f"{agent.name} to report")
        return self

    def node_size(self) -> tuple[int, int]:
        nodes = self.controller.stub().ListNodes(controller_pb2.ListNodesRequest(), timeout=10).nodes
        sizes = {(n.cpus, n.memory_mib) for n in nodes}
        if len(sizes) != 1:
            raise RuntimeError(f"the test:/// nodes should all be one size, not {sizes}")
        return sizes.pop()

    def fill_with_backfill(self, timeout: float = 120) -> int:
        """Backfill on; returns once every node is full of running backfill VMs."""
        cpus, _memory = self.node_size()
        stub = self.controller.stub()
        stub.SetBackfill(controller_pb2.SetBackfillRequest(enabled=True, vcpus=BACKFILL_VCPUS,
                                                           memory_mb=BACKFILL_MIB, interruption="terminate"),
                         timeout=10)
        want = self.nodes * (cpus // BACKFILL_VCPUS)
        wait_for(lambda: len(self.controller.leases("backfill", "running")) >= want, timeout,
                 f"{want} backfill VMs to run", interval=0.5)
        return want

    def play(self, script: list[ScriptRequest], request_timeout: float = 120) -> dict[str, str]:
        """The script in real time, a thread per request: returns request id -> its outcome
        (or the error that ended it)."""
        outcomes: dict[str, str] = {}
        started = time.monotonic()

        def one(item: ScriptRequest) -> None:
            stub = self.controller.stub()
            time.sleep(max(0.0, started + item.at - time.monotonic()))
            try:
                reply = stub.RequestVm(controller_pb2.VmRequest(vcpus=item.vcpus, memory_mib=item.memory_mib,
                                                                image="tiny", owner="replay",
                                                                request_id=item.request_id), timeout=request_timeout)
                outcomes[item.request_id] = reply.outcome
                if reply.outcome != "placed":
                    return
                time.sleep(item.hold)
                stub.Release(controller_pb2.ReleaseRequest(lease_id=reply.lease.lease_id), timeout=request_timeout)
            except grpc.RpcError as exc:
                outcomes[item.request_id] = f"error: {exc.code().name}: {exc.details()}"

        threads = [threading.Thread(target=one, args=(item,), daemon=True) for item in script]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return outcomes

    def settle(self, timeout: float = 120.0, quiet: float = 3.0) -> None:
        """Until every live lease runs and nothing changed for `quiet` seconds."""
        def snapshot():
            return sorted((l.lease_id, l.state) for l in self.controller.leases())
        last, since = snapshot(), time.monotonic()
        deadline = since + timeout
        while time.monotonic() < deadline:
            time.sleep(0.5)
            now = snapshot()
            if now != last:
                last, since = now, time.monotonic()
            elif all(state == "running" for _, state in now) and time.monotonic() - since >= quiet:
                return
        raise TimeoutError(f"the pool did not settle within {timeout}s")

    def stop(self) -> None:
        """The controller first (it closes its recording as it stops), then the agents."""
        if self.controller is not None:
            self.controller.stop()
        for agent in self.agents:
            agent.stop()
