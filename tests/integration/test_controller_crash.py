"""The controller killed at each step of a preemption, with real VMs: it exits at a named crash
point (os._exit, as kill -9 would leave it), is started again on the same store, and the pool
converges: the request is answered (placed, or failed with a reason), no lease is left in a
waiting state, every running lease has its VM on the node and every VM of ours has a lease.

The node has 2 CPUs; two backfill VMs fill it, and each on-demand request of 1 vCPU must
preempt the most recent one (its memory fits beside it: the instant path, victims on notice)."""
from __future__ import annotations

import json
import time

import grpc
import pytest

from protos import controller_pb2
from tests.agentproc import AgentProcess, wait_for
from tests.controllerproc import (ControllerProcess, agent_settings, backfilled_pool, books_match_node,
                                 full_of_backfill)

CONVERGE_SECONDS = 90   # the most a crashed request may take to settle after the restart
POINTS = ["after_write:request.placed", "before_call:launch", "before_call:stop", "after_call:launch",
          "after_call:stop", "after_write:vm.preempted"]


@pytest.fixture(scope="module")
def pool(test_env):
    with backfilled_pool(test_env, "crash", interruption="terminate", retry_seconds=5) as (controller, agent):
        yield controller, agent


@pytest.mark.parametrize("point", POINTS)
def test_a_controller_killed_mid_preemption_converges_after_a_restart(pool, point):
    controller, agent = pool
    wait_for(lambda: full_of_backfill(controller, agent), 240, "two booted backfill VMs")
    controller.stop()
    controller.start(env={"GLEANER_CRASH_AT": point})
    wait_for(lambda: controller.node_state("crash-node") == "up", 60, "the node to report")
    request = controller_pb2.VmRequest(vcpus=1, memory_mib=128, image="tiny", owner="crash",
                                       request_id=f"crash-{point.replace(':', '-').replace('.', '-')}")
    try:  # the instant path may answer before a later point (the victim's stop) is reached
        controller.stub().RequestVm(request, timeout=60)
    except grpc.RpcError as exc:
        assert exc.code() == grpc.StatusCode.UNAVAILABLE, exc
    controller.process.wait(60)
    assert controller.process.returncode == 137 and f"point={point}" in controller.log_text()
    controller.process = None
    restarted = time.monotonic()
    controller.start()
    reply = controller.stub().RequestVm(request, timeout=120)   # the same request, asked again
    assert reply.outcome in ("placed", "failed"), (reply.outcome, reply.reason)
    wait_for(lambda: books_match_node(controller, agent.stub()), CONVERGE_SECONDS, f"the pool to settle after a crash at {point}")
    took = time.monotonic() - restarted
    on_demand = controller.leases("on_demand")
    if reply.outcome == "placed":
        assert [l.lease_id for l in on_demand] == [reply.lease.lease_id]
    assert took < CONVERGE_SECONDS
    # clean up for the next point: the on-demand VM goes, backfill refills the node
    for lease in on_demand:
        controller.stub().Release(controller_pb2.ReleaseRequest(lease_id=lease.lease_id, force=True), timeout=60)


# -- the after_victims path: the new VM waits for its victims' memory ---------------------------

AFTER_VICTIMS_POINTS = ["after_write:request.placed", "after_call:stop", "after_write:request.victims_gone",
                        "before_call:launch", "after_call:launch"]


@pytest.fixture(scope="module")
def big_pool(test_env):
    """A node whose two backfill VMs each take nearly half its memory (a TCG guest touches only a
    few MiB of it): an on-demand VM of the same size does not fit beside both, so it waits for its
    victim's memory (the after_victims path)."""
    controller = ControllerProcess(test_env, name="crash-big", settings=dict(use_prediction=False, notice_seconds=5))
    controller.start()
    agent = AgentProcess(test_env, name="crash-big-node", settings=agent_settings(controller)).start()
    wait_for(lambda: controller.node_state("crash-big-node") == "up", 20, "the node to report")
    node = next(n for n in controller.stub().ListNodes(controller_pb2.ListNodesRequest(), timeout=10).nodes
                if n.node_id == "crash-big-node")
    size = (node.memory_mib - 1024) // 2
    controller.stub().SetBackfill(controller_pb2.SetBackfillRequest(enabled=True, memory_mb=size, grace_seconds=10,
                                                                    retry_seconds=5, interruption="terminate"),
                                  timeout=10)
    yield controller, agent, node.memory_mib, size
    agent.stop()
    controller.stop()


class MemoryWatch:
    """Polls the node's running domains and keeps the most memory they held at once."""

    def __init__(self, agent: AgentProcess) -> None:
        import threading
        from protos import agent_pb2
        self.most, self.done = 0, threading.Event()

        def watch() -> None:
            stub = agent.stub()
            while not self.done.wait(0.3):
                try:
                    domains = stub.ListDomains(agent_pb2.ListDomainsRequest(), timeout=5).domains
                except grpc.RpcError:
                    continue
                held = sum(d.memory_mib for d in domains if d.state == agent_pb2.DOMAIN_STATE_RUNNING)
                self.most = max(self.most, held)

        self.thread = threading.Thread(target=watch, daemon=True)
        self.thread.start()

    def stop(self) -> int:
        self.done.set()
        self.thread.join(10)
        return self.most


@pytest.mark.parametrize("point", AFTER_VICTIMS_POINTS)
def test_a_controller_killed_on_the_after_victims_path_never_overcommits_the_node(big_pool, point):
    controller, agent, capacity, size = big_pool
    try:
        wait_for(lambda: full_of_backfill(controller, agent), 240, "two booted backfill VMs")
    except TimeoutError:
        tail = "\n".join(controller.log_text().splitlines()[-80:])
        raise AssertionError(f"the node did not fill with backfill; the controller's log ends:\n{tail}") from None
    controller.stop()
    controller.start(env={"GLEANER_CRASH_AT": point})
    wait_for(lambda: controller.node_state("crash-big-node") == "up", 60, "the node to report")
    watch = MemoryWatch(agent)
    request = controller_pb2.VmRequest(vcpus=1, memory_mib=size, image="tiny", owner="crash",
                                       request_id=f"after-{point.replace(':', '-').replace('.', '-')}")
    try:
        controller.stub().RequestVm(request, timeout=60)
    except grpc.RpcError as exc:
        assert exc.code() == grpc.StatusCode.UNAVAILABLE, exc
    controller.process.wait(60)
    assert controller.process.returncode == 137 and f"point={point}" in controller.log_text()
    controller.process = None
    controller.start()
    reply = controller.stub().RequestVm(request, timeout=120)
    assert reply.outcome in ("placed", "failed"), (reply.outcome, reply.reason)
    placed = [json.loads(e.detail_json) for e in controller.events("request.placed")]
    assert any(d.get("request_id") == request.request_id and d.get("path") == "after_victims" for d in placed), \
        placed
    wait_for(lambda: books_match_node(controller, agent.stub()), CONVERGE_SECONDS,
             f"the pool to settle after a crash at {point}")
    most = watch.stop()
    assert most <= capacity, f"the node ran {most} MiB of VMs at once, past its {capacity} MiB"
    for lease in controller.leases("on_demand"):
        controller.stub().Release(controller_pb2.ReleaseRequest(lease_id=lease.lease_id, force=True), timeout=60)
