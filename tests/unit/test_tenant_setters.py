"""A batch tenant's goal and own backfill settings (SetTenantGoal, SetTenantBackfill), against a
real controller process over mutual TLS with one stand-in node (a real report stream, a real
gRPC fake agent; no libvirt). Both calls share one path in the controller (load the batch tenant,
replace one JSON field, store it with a tenant.changed event, tell the books): these tests pin
what an admin sees of it — the audit detail before and after, and every refusal (unknown,
on-demand, the built-in tenant's goal, a setting out of bounds) leaving the tenant and the audit
log as they were."""
from __future__ import annotations

import json
import time

import grpc
import pytest

from protos import controller_pb2
from tests.agentproc import LabEnv, wait_for
from tests.controllerproc import ControllerProcess
from tests.unit.test_tenants_api import fake_node_controller

NODE = "setters-node"


@pytest.fixture(scope="module")
def controller(tmp_path_factory):
    env = LabEnv.in_dir(tmp_path_factory.mktemp("tenant-setters"), nodes=(NODE,))
    with fake_node_controller(env, "setters-ctl", NODE) as controller:
        wait_for(lambda: controller.node_state(NODE) == "up", 30, "the node up (admission books its capacity)")
        stub = controller.stub()
        for name, kind in (("grid", "batch"), ("shop", "on_demand")):
            stub.CreateTenant(controller_pb2.CreateTenantRequest(name=name, kind=kind, upper_vcpus=1,
                                                                 upper_memory_mib=512), timeout=10)
        yield controller


def tenant(controller: ControllerProcess, name: str) -> controller_pb2.Tenant:
    reply = controller.stub().ListTenants(controller_pb2.ListTenantsRequest(), timeout=10)
    return next(t for t in reply.tenants if t.name == name)


def changed(controller: ControllerProcess) -> list[dict]:
    return [json.loads(e.detail_json) for e in controller.events("tenant.changed")]


def goal(name: str, work: float = 7.0) -> controller_pb2.SetTenantGoalRequest:
    return controller_pb2.SetTenantGoalRequest(name=name, kind="deadline", work_vcpu_hours=work,
                                               deadline=time.time() + 7200)


def refused(call) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value


def test_a_goal_set_and_cleared_is_audited_with_the_goal_before_and_after(controller):
    stub = controller.stub()
    reply = stub.SetTenantGoal(goal("grid"), timeout=10)
    stored = json.loads(reply.goal_json)
    assert stored["kind"] == "deadline" and stored["work_vcpu_hours"] == 7.0
    assert tenant(controller, "grid").goal_json == reply.goal_json
    last = changed(controller)[-1]
    assert last["tenant"] == "grid" and last["kind"] == "batch" and last["upper"] == "1,512"
    assert last["goal"] == reply.goal_json and last["before_goal"] == "none" and "backfill" not in last

    cleared = stub.SetTenantGoal(controller_pb2.SetTenantGoalRequest(name="grid", clear=True), timeout=10)
    assert cleared.goal_json == "" and tenant(controller, "grid").goal_json == ""
    last = changed(controller)[-1]
    assert last["goal"] == "none" and last["before_goal"] == reply.goal_json


def test_own_backfill_settings_merge_reset_and_are_audited_before_and_after(controller):
    stub = controller.stub()
    first = stub.SetTenantBackfill(controller_pb2.SetTenantBackfillRequest(name="grid", max_instances=1), timeout=10)
    assert json.loads(first.backfill_json) == {"max_instances": 1}
    last = changed(controller)[-1]
    assert last["backfill"] == first.backfill_json and last["before_backfill"] == "pool-wide" and "goal" not in last

    merged = stub.SetTenantBackfill(controller_pb2.SetTenantBackfillRequest(name="grid", memory_mb=192), timeout=10)
    assert json.loads(merged.backfill_json) == {"max_instances": 1, "memory_mb": 192}
    assert changed(controller)[-1]["before_backfill"] == first.backfill_json

    reset = stub.SetTenantBackfill(controller_pb2.SetTenantBackfillRequest(name="grid", reset=True), timeout=10)
    assert reset.backfill_json == "" and tenant(controller, "grid").backfill_json == ""
    last = changed(controller)[-1]
    assert last["backfill"] == "pool-wide" and last["before_backfill"] == merged.backfill_json


@pytest.mark.parametrize("call, code, words", [
    (lambda s: s.SetTenantGoal(goal("shop"), timeout=10), grpc.StatusCode.FAILED_PRECONDITION,
     "tenant 'shop' is on-demand: only batch tenants run backfill and goals"),
    (lambda s: s.SetTenantBackfill(controller_pb2.SetTenantBackfillRequest(name="shop", max_instances=1), timeout=10),
     grpc.StatusCode.FAILED_PRECONDITION, "tenant 'shop' is on-demand: only batch tenants run backfill and goals"),
    (lambda s: s.SetTenantGoal(goal("nobody"), timeout=10), grpc.StatusCode.NOT_FOUND, "no tenant 'nobody'"),
    (lambda s: s.SetTenantBackfill(controller_pb2.SetTenantBackfillRequest(name="nobody", vcpus=1), timeout=10),
     grpc.StatusCode.NOT_FOUND, "no tenant 'nobody'"),
    (lambda s: s.SetTenantGoal(goal("backfill"), timeout=10), grpc.StatusCode.FAILED_PRECONDITION,
     "tenant 'backfill' is the built-in batch tenant and takes no goal"),
    (lambda s: s.SetTenantGoal(goal("grid", work=-8), timeout=10), grpc.StatusCode.INVALID_ARGUMENT,
     "work_vcpu_hours"),
    (lambda s: s.SetTenantBackfill(controller_pb2.SetTenantBackfillRequest(name="grid", vcpus=65), timeout=10),
     grpc.StatusCode.INVALID_ARGUMENT, "vcpus"),
])
def test_refusals_name_the_problem_and_change_nothing(controller, call, code, words):
    before = ({t.name: (t.goal_json, t.backfill_json) for t in controller.stub().ListTenants(
        controller_pb2.ListTenantsRequest(), timeout=10).tenants}, len(changed(controller)))
    err = refused(lambda: call(controller.stub()))
    assert err.code() == code and words in err.details(), (err.code(), err.details())
    after = ({t.name: (t.goal_json, t.backfill_json) for t in controller.stub().ListTenants(
        controller_pb2.ListTenantsRequest(), timeout=10).tenants}, len(changed(controller)))
    assert after == before
