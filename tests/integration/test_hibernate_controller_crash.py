"""The controller killed at each new step of hibernation (issue 25), with real VMs: it exits at a
named crash point (os._exit, as kill -9 would), is started again on the same store, and the pool
converges: the request is answered, no lease is left in a waiting state, every running lease has
its running VM, every hibernated lease its saved domain, and no domain of ours is without its lease.

The node has 2 CPUs; two backfill VMs fill it (interruption = hibernate), and an on-demand request
of 1 vCPU saves the most recent one (the instant path). Saving: the controller dies around the
save. Resuming: the victim is saved first, then the controller dies around its resume, which the
release of the on-demand VM brings; after the restart the saved VM runs again."""
from __future__ import annotations

import time

import grpc
import pytest

from protos import controller_pb2
from tests.agentproc import wait_for
from tests.controllerproc import ControllerProcess, backfilled_pool, books_match_node, full_of_backfill

CONVERGE_SECONDS = 120
SAVE_POINTS = ["before_call:stop", "after_call:stop", "after_write:vm.hibernated"]
RESUME_POINTS = ["after_write:vm.resuming", "before_call:resume", "after_call:resume"]


@pytest.fixture(scope="module")
def pool(test_env):
    with backfilled_pool(test_env, "hibcrash", interruption="hibernate", retry_seconds=5) as (controller, agent):
        yield controller, agent


def crash_and_restart(controller: ControllerProcess, point: str, act) -> None:
    """Restart the controller armed at `point`, do `act`, see it die there, start it again."""
    controller.stop()
    controller.start(env={"GLEANER_CRASH_AT": point})
    wait_for(lambda: controller.node_state("hibcrash-node") == "up", 60, "the node to report")
    try:
        act()
    except grpc.RpcError as exc:
        assert exc.code() == grpc.StatusCode.UNAVAILABLE, exc
    controller.process.wait(90)
    assert controller.process.returncode == 137 and f"point={point}" in controller.log_text()
    controller.process = None
    controller.start()


def request(name: str) -> controller_pb2.VmRequest:
    return controller_pb2.VmRequest(vcpus=1, memory_mib=128, image="tiny", owner="crash", request_id=name)


def release_on_demand(controller: ControllerProcess) -> None:
    for lease in controller.leases("on_demand"):
        controller.stub().Release(controller_pb2.ReleaseRequest(lease_id=lease.lease_id, force=True), timeout=60)


@pytest.mark.parametrize("point", SAVE_POINTS)
def test_a_controller_killed_around_a_save_converges_with_the_victim_saved_or_stopped(pool, point):
    controller, agent = pool
    wait_for(lambda: full_of_backfill(controller, agent), 240, "two booted backfill VMs")
    asked = request(f"hibcrash-{point.replace(':', '-').replace('.', '-')}")
    crash_and_restart(controller, point, lambda: controller.stub().RequestVm(asked, timeout=60))
    reply = controller.stub().RequestVm(asked, timeout=120)   # the same request, asked again
    assert reply.outcome in ("placed", "failed"), (reply.outcome, reply.reason)
    wait_for(lambda: books_match_node(controller, agent.stub()), CONVERGE_SECONDS,
             f"the pool to settle after a crash at {point}")
    saved = controller.leases("backfill", "hibernated")
    assert len(saved) <= 1 and len(controller.leases("backfill", "running")) + len(saved) <= 2
    release_on_demand(controller)   # the next point starts from a full node again (a saved VM resumes)
    wait_for(lambda: not controller.leases("backfill", "hibernated"), CONVERGE_SECONDS, "the saved VM's resume")


@pytest.mark.parametrize("point", RESUME_POINTS)
def test_a_controller_killed_around_a_resume_converges_with_the_vm_running_again(pool, point):
    controller, agent = pool
    wait_for(lambda: full_of_backfill(controller, agent), 240, "two booted backfill VMs")
    reply = controller.stub().RequestVm(request(f"hibresume-{point.replace(':', '-').replace('.', '-')}"),
                                        timeout=120)
    assert reply.outcome == "placed", reply.reason
    (victim,) = wait_for(lambda: controller.leases("backfill", "hibernated"), CONVERGE_SECONDS, "the victim's save")
    crash_and_restart(controller, point, lambda: release_on_demand(controller))
    started = time.monotonic()
    wait_for(lambda: [l for l in controller.leases("backfill", "running") if l.lease_id == victim.lease_id]
             and books_match_node(controller, agent.stub()), CONVERGE_SECONDS,
             f"the saved VM running again after a crash at {point}")
    assert not controller.leases("on_demand") and time.monotonic() - started < CONVERGE_SECONDS
