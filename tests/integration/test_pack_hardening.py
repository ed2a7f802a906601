"""MemoryDenyWriteExecute=yes in both units: the real daemons run without writable-and-
executable memory. Here the kernel's own per-process switch, prctl(PR_SET_MDWE), stands in for
systemd's seccomp filter (the same refusal of W+X mappings), set at interpreter start through a
sitecustomize, so every import (grpc, cryptography's cffi, libvirt, numpy) happens under it.
The lab (tests/bench/lab.py) runs the units themselves under real systemd."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from protos import controller_pb2, controller_pb2_grpc
from tests.agentproc import AgentProcess, LabEnv, launch_request, unique_name
from tests.controllerproc import ControllerProcess

SITECUSTOMIZE = """\
import ctypes, mmap, os
PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN = 65, 1
if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0) != 0:
    raise SystemExit("prctl(PR_SET_MDWE) failed: " + os.strerror(ctypes.get_errno()))
try:   # proof it is in force: a W+X mapping is refused
    mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    raise SystemExit("PR_SET_MDWE is not in force")
except PermissionError:
    pass
open(os.environ["GLEANER_MDWE_MARK"], "a").write(f"{os.getpid()}\\n")
"""


def mdwe_env(directory: Path) -> dict[str, str]:
    site = directory / "mdwe-site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH", "")]))
    return {"PYTHONPATH": path, "GLEANER_MDWE_MARK": str(directory / "mdwe-pids")}


@pytest.fixture
def env():
    lab = LabEnv.create()
    yield lab
    lab.remove()


def test_the_controller_serves_without_writable_executable_memory(env):
    controller = ControllerProcess(env).start(mdwe_env(env.root))
    try:
        assert str(controller.process.pid) in (env.root / "mdwe-pids").read_text().split()
        report = controller_pb2.NodeReport(node_id="mdwe-node", agent_address="127.0.0.1:1", cpus=4, memory_mib=8192,
                                           images=["tiny"], min_memory_mib=32)
        with controller.channel(env.pki.agent("mdwe-node")) as channel:   # mutual TLS both ways
            assert controller_pb2_grpc.ControllerStub(channel).Report(iter([report]), timeout=10).reports == 1
        assert [n.node_id for n in controller.stub().ListNodes(controller_pb2.ListNodesRequest(), timeout=10).nodes] \
            == ["mdwe-node"]
        assert controller.process.poll() is None
    finally:
        controller.stop()


@pytest.mark.libvirt
def test_the_agent_launches_a_vm_without_writable_executable_memory(test_env):
    agent = AgentProcess(test_env, name=f"mdwe-{unique_name('a')[-4:]}").start(mdwe_env(test_env.root))
    try:
        assert str(agent.process.pid) in (test_env.root / "mdwe-pids").read_text().split()
        name = unique_name("mdwe")
        reply = agent.stub().LaunchDomain(launch_request(name), timeout=120)
        assert reply.created and reply.domain.name == name
        assert agent.process.poll() is None
    finally:
        agent.stop()
