"""Parity (issue 10, item 4): the same short event sequence through the live controller and
through the simulator gives the same placements, victims and launches.

The live half is a real controller process with agents on libvirt's test:///default driver (an
in-process fake hypervisor: no QEMU is started); the simulator gets nodes of the size those
agents report and the controller's own settings. The sequence and how its outcome is read are in
tests/parity.py.

What is compared, and why only that. Deterministic in both: which node each on-demand request is
placed on (or that it is rejected), which backfill VMs it preempts, named by (node, launch number
on that node), and how many backfill VMs each node launched. Not compared: times, lease ids and
VM names (random in the live controller), how a victim's stop went, and audit events the live
launcher's timing adds or merges (it runs on its own thread, on a timer and when asked; the
simulator runs it at once). The live test waits for the pool to settle after each step, so each
step is decided on the same books in both; the sequence never lets a decision choose between two
backfill VMs launched by the same fill, whose relative age is a race live.

It needs the lab environment (the `test_env` fixture: lab PKI, image directory; it checks that
libvirtd is up), so it is marked `libvirt` and the `-m "not libvirt"` lane leaves it out; the
simulator half alone runs there (tests/unit/test_sim_script.py).
"""
from __future__ import annotations

import time

import pytest

from controller.config import load_config
from protos import controller_pb2
from tests import parity
from tests.agentproc import AgentProcess, wait_for
from tests.controllerproc import ControllerProcess, agent_settings

pytestmark = pytest.mark.libvirt

SETTLE_SECONDS = 2.0    # the books unchanged this long, every lease running: the step is over


def settle(controller: ControllerProcess, timeout: float = 60.0) -> None:
    """Wait until every live lease runs and nothing changed for SETTLE_SECONDS (a fill the last
    step asked for has had time to run: the launcher answers within milliseconds)."""
    def snapshot():
        return sorted((l.lease_id, l.state) for l in controller.leases())
    last, since = snapshot(), time.monotonic()
    deadline = since + timeout
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now = snapshot()
        if now != last:
            last, since = now, time.monotonic()
        elif all(state == "running" for _, state in now) and time.monotonic() - since >= SETTLE_SECONDS:
            return
    raise TimeoutError(f"the pool did not settle within {timeout}s: {last}")


def run_live(controller: ControllerProcess, agents: list[AgentProcess]) -> dict:
    stub = controller.stub()
    stub.SetBackfill(controller_pb2.SetBackfillRequest(**parity.BACKFILL), timeout=10)
    answers: dict[str, tuple[str | None, list[str]]] = {}
    leases_of: dict[str, str] = {}
    for step in parity.STEPS:
        if step.action == "join":
            agent = agents[int(step.arg)].start()
            wait_for(lambda: controller.node_state(agent.name) == "up", 20, f"{agent.name} to report")
        elif step.action == "request":
            reply = stub.RequestVm(controller_pb2.VmRequest(vcpus=step.vcpus, memory_mib=step.memory_mib,
                                                            image="tiny", owner="parity", request_id=step.arg),
                                   timeout=120)
            assert reply.outcome in ("placed", "rejected"), (step, reply.outcome, reply.reason)
            placed = reply.outcome == "placed"
            answers[step.arg] = (reply.lease.lease_id if placed else None, [p.lease_id for p in reply.preempted])
            if placed:
                leases_of[step.arg] = reply.lease.lease_id
        else:
            stub.Release(controller_pb2.ReleaseRequest(lease_id=leases_of[step.arg]), timeout=60)
        settle(controller)
    leases = stub.ListVms(controller_pb2.ListVmsRequest(include_ended=True), timeout=10).leases
    facts = [parity.LeaseFacts(l.lease_id, l.role, l.node_id, l.created_at, l.launched_at > 0) for l in leases]
    return parity.outcome(facts, answers, [a.name for a in agents])


def node_size(controller: ControllerProcess) -> tuple[int, int]:
    sizes = {(n.cpus, n.memory_mib) for n in controller.stub().ListNodes(controller_pb2.ListNodesRequest(),
                                                                         timeout=10).nodes}
    assert len(sizes) == 1, f"the test:/// nodes should all be one size, not {sizes}"
    return sizes.pop()


def test_live_controller_and_simulator_make_the_same_decisions(test_env):
    controller = ControllerProcess(test_env, name="parity-ctl", settings=dict(parity.SETTINGS)).start()
    # Names sort as the simulator's n0, n1, n2 do: ties in the policy break by node id.
    agents = [AgentProcess(test_env, name=f"parity{i}", settings=agent_settings(
        controller, libvirt_uri="test:///default", metrics_listen="")) for i in range(parity.NODES)]
    try:
        live = run_live(controller, agents)
        cpus, memory_mib = node_size(controller)
        config = load_config(controller.config_path)   # the very settings the live controller ran with
    finally:
        for agent in agents:
            agent.stop()
        controller.stop()
    _sim, simulated = parity.run_sim(cpus, memory_mib, config)
    assert live == simulated
    assert simulated == parity.EXPECTED   # and both are what the policy says, worked out by hand
