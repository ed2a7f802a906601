"""A real gleaner-controller subprocess with mutual TLS, for tests and benchmarks."""
from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from controller.config import ControllerConfig, to_toml
from gleaner_common.identity import Role
from gleaner_common.pki import TlsFiles
from gleaner_common.rpc import channel_to
from protos import controller_pb2, controller_pb2_grpc
from tests.agentproc import TEST_PREFIX, AgentProcess, LabEnv, ServiceProcess, free_port, wait_for, wait_for_console


@dataclass
class ControllerProcess(ServiceProcess):
    module = "controller"

    env: LabEnv
    name: str = "controller"
    port: int = field(default_factory=free_port)
    settings: dict = field(default_factory=dict)   # further ControllerConfig fields
    process: subprocess.Popen | None = None

    @property
    def state_dir(self) -> Path:
        return self.env.root / self.name

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.state_dir / "controller.log"

    @property
    def identity(self) -> tuple[Role, str]:
        return Role.CONTROLLER, ""

    @property
    def config_path(self) -> Path:
        return self.state_dir / "controller.toml"

    def write_config(self) -> None:
        self.state_dir.mkdir(exist_ok=True)
        values = dict(listen=self.address, state_dir=self.state_dir, log_level="debug",
                      vm_name_prefix=f"{TEST_PREFIX}{self.name}-", suspect_after_seconds=2.0, down_after_seconds=5.0,
                      liveness_check_seconds=0.5, tls=self.env.tls(self.env.pki.controller),
                      metrics_listen="127.0.0.1:0")   # any free port: its log says which (metrics_port)
        self.config_path.write_text(to_toml(ControllerConfig(**{**values, **self.settings})))

    @property
    def metrics_port(self) -> int:
        """The Prometheus endpoint's port, as the controller logged it (metrics.serving)."""
        import re
        found = re.search(r"event=metrics\.serving .*?port=(\d+)", self.log_path.read_text())
        if not found:
            raise AssertionError(f"the controller did not log metrics.serving: {self.log_path}")
        return int(found.group(1))

    def metrics_text(self) -> str:
        """What Prometheus would scrape from it now."""
        import urllib.request
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as reply:
            return reply.read().decode()

    def stub(self, tls: TlsFiles | None = None) -> controller_pb2_grpc.ControllerStub:
        """A stub with the lab admin's identity unless `tls`."""
        return controller_pb2_grpc.ControllerStub(self.channel(tls or self.env.pki.admin))

    def gleanctl_args(self, tls: TlsFiles | None = None) -> list[str]:
        tls = tls or self.env.pki.admin
        return ["--controller", self.address, "--ca", str(tls.ca), "--cert", str(tls.cert), "--key", str(tls.key)]

    def leases(self, role: str | None = None, state: str | None = None) -> list[controller_pb2.Lease]:
        reply = self.stub().ListVms(controller_pb2.ListVmsRequest(), timeout=10)
        return [l for l in reply.leases if (role is None or l.role == role) and (state is None or l.state == state)]

    def node_state(self, node_id: str) -> str:
        for node in self.stub().ListNodes(controller_pb2.ListNodesRequest(), timeout=10).nodes:
            if node.node_id == node_id:
                return node.state
        return "unknown"

    def events(self, kind: str = "") -> list[controller_pb2.AuditEvent]:
        return list(self.stub().ListEvents(controller_pb2.ListEventsRequest(kind=kind, limit=1000), timeout=10).events)


def agent_settings(controller: ControllerProcess, **more) -> dict:
    """AgentProcess settings that make it report to `controller` twice a second."""
    return dict(controller_address=controller.address, controller_report_seconds=0.5, **more)


def run_gleanctl(controller: ControllerProcess, *args: str, code: int = 0) -> subprocess.CompletedProcess:
    """gleanctl against `controller` as the lab admin; its exit code must be `code`."""
    import sys
    from tests.agentproc import REPO
    done = subprocess.run([sys.executable, "-m", "controller.gleanctl", *controller.gleanctl_args(), *args],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    return done


@contextmanager
def fake_driver_pool(env: LabEnv, name: str, nodes: int = 2, **settings) -> Iterator[tuple[ControllerProcess, list]]:
    """A controller (`settings`: ControllerConfig fields) and `nodes` agents on libvirt's test:///
    driver (16 CPUs each, fake domains: for the controller's side), every node up; stopped on the way out."""
    controller = ControllerProcess(env, name=name, settings=settings).start()
    agents: list[AgentProcess] = []
    try:
        agents += [AgentProcess(env, name=f"{name}-n{i}", settings=agent_settings(
            controller, libvirt_uri="test:///default", metrics_listen="")).start() for i in range(1, nodes + 1)]
        for agent in agents:
            wait_for(lambda: controller.node_state(agent.name) == "up", 20, f"{agent.name} to report")
        yield controller, agents
    finally:
        for agent in agents:
            agent.stop()
        controller.stop()


def rpc_code(call) -> grpc.StatusCode | None:
    try:
        call()
    except grpc.RpcError as exc:
        return exc.code()
    return None


def books_match_node(controller: ControllerProcess, agent_stub) -> bool:
    """Books and node agree: every lease running with its VM, every VM of ours with a running lease;
    and every hibernated lease with its saved domain, every saved domain with a hibernated lease."""
    from protos import agent_pb2
    try:
        leases = controller.leases()
        domains = agent_stub.ListDomains(agent_pb2.ListDomainsRequest(), timeout=10).domains
    except grpc.RpcError:
        return False
    running = {d.name for d in domains if d.state == agent_pb2.DOMAIN_STATE_RUNNING}
    saved = {d.name for d in domains if d.state == agent_pb2.DOMAIN_STATE_HIBERNATED}
    return all(l.state in ("running", "hibernated") for l in leases) \
        and {l.vm_name for l in leases if l.state == "running"} == running \
        and {l.vm_name for l in leases if l.state == "hibernated"} == saved \
        and len(running) + len(saved) == len(domains)


@contextmanager
def backfilled_pool(env: LabEnv, name: str, interruption: str, settings: dict | None = None, controller_name: str = "",
                    **backfill) -> Iterator[tuple[ControllerProcess, AgentProcess]]:
    """A controller (`settings`; by default no prediction and a 5 s notice) and its agent
    `name`-node, backfill on with 128 MiB VMs (`backfill`: other SetBackfill fields) and victims
    treated per `interruption`; both stopped on the way out."""
    controller = ControllerProcess(env, name=controller_name or name,
                                   settings=settings or dict(use_prediction=False, notice_seconds=5))
    controller.start()
    agent = AgentProcess(env, name=f"{name}-node", settings=agent_settings(controller)).start()
    try:
        wait_for(lambda: controller.node_state(f"{name}-node") == "up", 30, "the node to report")
        controller.stub().SetBackfill(controller_pb2.SetBackfillRequest(
            enabled=True, memory_mb=128, interruption=interruption, **{"grace_seconds": 10, **backfill}), timeout=10)
        yield controller, agent
    finally:
        agent.stop()
        controller.stop()


def full_of_backfill(controller: ControllerProcess, agent: AgentProcess) -> list:
    """The two backfill leases of a 2-CPU node once both run booted guests and nothing else is
    booked; [] until then."""
    leases = controller.leases("backfill", "running")
    if len(leases) != 2 or len(controller.leases()) != 2:
        return []
    for lease in leases:
        wait_for_console(agent.state_dir / "console" / f"{lease.vm_name}.log", "GLEANER-READY", timeout=120)
    return leases


@contextmanager
def reporting_node(controller: ControllerProcess, node_id: str, report: Callable[[], controller_pb2.NodeReport],
                   every_s: float = 0.5) -> Iterator[None]:
    """A node's report stream to `controller`, with the node's own certificate: `report()` twice a
    second until the block ends, the node up before it starts (a stand-in node, no agent)."""
    stop = threading.Event()

    def reports():
        while not stop.is_set():
            yield report()
            stop.wait(every_s)
    stub = controller_pb2_grpc.ControllerStub(channel_to(Role.CONTROLLER, "", controller.address,
                                                         controller.env.pki.agent(node_id)))
    stream = threading.Thread(target=lambda: stub.Report(reports()), daemon=True)
    stream.start()
    try:
        wait_for(lambda: controller.node_state(node_id) == "up", 20, f"{node_id} to report")
        yield
    finally:
        stop.set()
        stream.join(10)
