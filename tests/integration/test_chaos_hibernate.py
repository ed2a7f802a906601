"""The chaos bench's hibernation checks (tests/bench/chaos.py) against a real pool: they pass on a
pool that has settled with a saved VM, and fail when they should. A state file planted in the
agent's hibernation directory with no hibernated lease is an orphan and keeps the pool from
settling (one with a gone domain's name only until the agent's reaper removes it); a saved VM
still hibernated after the release is not counted as resumed; once the release brings its
resume, the checks pass again with the VM running.

Real controller and agent processes, mutual TLS, real libvirt: two backfill VMs (interruption =
hibernate, set explicitly), and an on-demand request that saves one of them."""
from __future__ import annotations

import pytest

from protos import controller_pb2
from tests.agentproc import AgentProcess, wait_for
from tests.bench import chaos
from tests.controllerproc import ControllerProcess, agent_settings

SETTLE_SECONDS = 120


@pytest.fixture()
def saved_pool(test_env):
    controller = ControllerProcess(test_env, name="chaoshib", settings=dict(use_prediction=False, notice_seconds=5))
    controller.start()
    agent = AgentProcess(test_env, name="chaoshib-node", settings=agent_settings(controller)).start()
    try:
        wait_for(lambda: controller.node_state(agent.name) == "up", 30, "the node to report")
        chaos.set_interruption(controller, "hibernate")
        wait_for(lambda: chaos.full(controller, agent), 300, "two booted backfill VMs")
        reply = controller.stub().RequestVm(controller_pb2.VmRequest(
            vcpus=1, memory_mib=128, image="tiny", owner="chaos", request_id="chaoshib-1"), timeout=120)
        assert reply.outcome == "placed", reply.reason
        (victim,) = wait_for(lambda: controller.leases("backfill", "hibernated"), SETTLE_SECONDS, "the victim's save",
                             interval=0.5)
        yield controller, agent, victim
    finally:
        agent.stop()
        controller.stop()


def test_the_hibernation_checks_pass_on_a_settled_pool_and_fail_on_an_orphan_state_file(saved_pool):
    controller, agent, victim = saved_pool
    wait_for(lambda: chaos.settled(controller, agent, True, []), SETTLE_SECONDS, "the saved pool to settle",
             interval=0.5)
    assert chaos.state_files(agent) == {f"{victim.vm_name}.save": chaos.SAVE_MAGIC}
    assert chaos.hibernate_faults(controller, agent) == {"missing_state_files": 0, "orphan_state_files": 0}

    # a saved VM not yet resumed is no success: the release has not happened
    assert chaos.victim_outcome(controller, victim.lease_id) == "waiting: hibernated"
    assert not chaos.settled(controller, agent, True, [victim.lease_id])

    # an orphan the agent leaves alone (no domain's name, so not the agent's to judge) is seen by
    # every check for as long as it is there
    foreign = agent.state_dir / "hibernation" / "copied-by-hand.save.bak"
    foreign.write_bytes(chaos.SAVE_MAGIC + b"\0" * 64)
    try:
        assert chaos.hibernate_faults(controller, agent)["orphan_state_files"] == 1
        assert not chaos.settled(controller, agent, True, [])
        assert chaos.leftovers(controller, agent, True)["orphan_state_files"] == 1
    finally:
        foreign.unlink(missing_ok=True)

    # a complete-looking state file of a domain that does not exist: the agent's reaper
    # removes it (every reap_interval_seconds; the checks above, read meanwhile, once raced it), and
    # the pool settles again
    orphan = agent.state_dir / "hibernation" / f"{victim.vm_name}x.save"
    orphan.write_bytes(chaos.SAVE_MAGIC + b"\0" * 64)
    wait_for(lambda: not orphan.exists(), 60, "the reaper to remove the orphan state file", interval=0.5)
    assert chaos.settled(controller, agent, True, [])

    chaos.release_on_demand(controller)
    wait_for(lambda: chaos.settled(controller, agent, True, [victim.lease_id]), SETTLE_SECONDS,
             "the saved VM's resume", interval=0.5)
    assert chaos.victim_outcome(controller, victim.lease_id) == "resumed"
    assert chaos.state_files(agent) == {}
