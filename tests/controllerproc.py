"""A real gleaner-controller subprocess with mutual TLS, for tests and benchmarks."""
from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from controller.config import ControllerConfig, to_toml
from nodeagent.client import client_channel
from nodeagent.config import TlsConfig
from protos import controller_pb2, controller_pb2_grpc
from tests.agentproc import TEST_PREFIX, LabEnv, ServiceProcess, free_port


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
    def config_path(self) -> Path:
        return self.state_dir / "controller.toml"

    def write_config(self) -> None:
        self.state_dir.mkdir(exist_ok=True)
        tls = self.env.pki["server"]
        values = dict(listen=self.address, state_dir=self.state_dir, log_level="debug",
                      vm_name_prefix=f"{TEST_PREFIX}{self.name}-", suspect_after_seconds=2.0, down_after_seconds=5.0,
                      liveness_check_seconds=0.5, tls=TlsConfig(ca=tls.ca, cert=tls.cert, key=tls.key))
        self.config_path.write_text(to_toml(ControllerConfig(**{**values, **self.settings})))

    def stub(self) -> controller_pb2_grpc.ControllerStub:
        return controller_pb2_grpc.ControllerStub(client_channel(self.address, self.env.pki["client"]))

    def gleanctl_args(self) -> list[str]:
        tls = self.env.pki["client"]
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


def rpc_code(call) -> grpc.StatusCode | None:
    try:
        call()
    except grpc.RpcError as exc:
        return exc.code()
    return None
