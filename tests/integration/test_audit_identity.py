"""Every audit event an admin's call causes names the admin ("by"), as a real controller process
writes it: requests placed and released, backfill settings, reserves, hints and reserve
settings. Events of the controller's own work or of agents' reports name nobody."""
from __future__ import annotations

import json

import pytest

from protos import controller_pb2
from tests.agentproc import AgentProcess, LabEnv, wait_for
from tests.controllerproc import ControllerProcess, agent_settings

ADMIN = "admin/lab-admin"


@pytest.fixture(scope="module")
def pool():
    """A controller and one agent on libvirt's test:/// driver (no domain of the real libvirtd)."""
    env = LabEnv.create()
    controller = ControllerProcess(env, name="audit").start()
    agent = AgentProcess(env, name="audit-n1", settings=agent_settings(
        controller, libvirt_uri="test:///default", metrics_listen="")).start()
    wait_for(lambda: controller.node_state("audit-n1") == "up", 30, "the node to report")
    yield controller
    agent.stop()
    controller.stop()
    env.remove()


def by_of(controller: ControllerProcess, kind: str) -> list[str]:
    return [json.loads(e.detail_json).get("by", "") for e in controller.events(kind)]


def test_the_admin_is_named_in_every_event_their_calls_cause(pool):
    stub = pool.stub()
    placed = stub.RequestVm(controller_pb2.VmRequest(vcpus=1, memory_mib=128, image="tiny", owner="alice",
                                                     request_id="audit-1"), timeout=30)
    assert placed.outcome == "placed", placed.reason
    stub.Release(controller_pb2.ReleaseRequest(lease_id=placed.lease.lease_id), timeout=30)
    stub.SetBackfill(controller_pb2.SetBackfillRequest(max_instances=3), timeout=10)
    stub.SetReserve(controller_pb2.Reserve(node_id="audit-n1", vcpus=1), timeout=10)
    stub.AddHint(controller_pb2.AddHintRequest(nodes=1, in_hours=1, for_hours=1, label="audit"), timeout=10)
    stub.SetReserveSettings(controller_pb2.SetReserveSettingsRequest(static_nodes=1), timeout=10)
    for kind in ("request.placed", "vm.stopping", "backfill.configured", "reserve.set", "reserve.hint",
                 "reserve.configured"):
        assert by_of(pool, kind)[-1:] == [ADMIN], kind
    # the node's own events (its report) and the controller's (the VM's launch answered) name nobody
    assert set(by_of(pool, "node.joined")) == {""}
    assert set(by_of(pool, "vm.launched")) == {""}
