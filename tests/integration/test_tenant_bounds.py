"""Tenants' bounds on a real pool (issue 26): a controller and one agent on the local libvirtd
(2 CPUs), full of two real backfill VMs (the tiny guest, TCG). Tenant `gold` has a lower bound of
1 vCPU, tenant `bob` an upper bound of 1 vCPU. bob's first VM takes one backfill VM's room;
another tenant's request is refused the vCPU guaranteed to gold, and bob's second is refused past
its upper bound; then gold's request gets its guaranteed vCPU by preempting the other backfill VM.
"""
from __future__ import annotations

import json

import pytest

from protos import controller_pb2
from tests.agentproc import remove_test_domains, wait_for
from tests.controllerproc import backfilled_pool, full_of_backfill, run_gleanctl as gleanctl

pytestmark = pytest.mark.libvirt


def request(controller, owner: str, request_id: str) -> controller_pb2.VmResult:
    return controller.stub().RequestVm(controller_pb2.VmRequest(vcpus=1, memory_mib=128, image="tiny", owner=owner,
                                                                request_id=request_id), timeout=120)


def test_a_lower_bound_holds_against_another_tenant_and_preempts_backfill_for_its_own(test_env):
    with backfilled_pool(test_env, "tenants", "terminate", max_instances=2, grace_seconds=2) as (controller, agent):
        victims = wait_for(lambda: full_of_backfill(controller, agent), 180, "two booted backfill VMs")
        gleanctl(controller, "tenant", "create", "gold", "--kind", "on-demand", "--lower", "1,256",
                 "--upper", "1,1024")
        gleanctl(controller, "tenant", "create", "bob", "--kind", "on-demand", "--lower", "0,0",
                 "--upper", "1,1024")

        first = request(controller, "bob", "t-bob-1")
        assert first.outcome == "placed" and len(first.preempted) == 1, first.reason

        other = request(controller, "carol", "t-carol-1")   # the default tenant: gold's vCPU is kept from it
        assert other.outcome == "rejected", other.reason
        assert "kept for other tenants' lower bounds" in other.reason
        over = request(controller, "bob", "t-bob-2")
        assert over.outcome == "rejected" and "past its upper bound 1 vCPUs, 1024 MiB" in over.reason
        codes = {json.loads(e.detail_json)["request_id"]: json.loads(e.detail_json)["reason_code"]
                 for e in controller.events("request.rejected")}
        assert codes == {"t-carol-1": "tenant_lower_bounds", "t-bob-2": "tenant_upper_bound"}
        assert len(controller.events("vm.preempting")) == 1   # the refusals preempted nothing

        gold = request(controller, "gold", "t-gold-1")
        assert gold.outcome == "placed" and len(gold.preempted) == 1, gold.reason
        assert {p.lease_id for p in (*first.preempted, *gold.preempted)} == {v.lease_id for v in victims}
        wait_for(lambda: len(controller.events("vm.preempted")) == 2, 90, "both victims' stops")
        owners = sorted(l.owner for l in controller.leases("on_demand", "running"))
        assert owners == ["bob", "gold"]
        rows = {line.split()[0]: line.split() for line in gleanctl(controller, "tenant", "show").stdout.splitlines()[1:]
                if line and not line.startswith("pool:")}
        assert rows["gold"][2:5] == ["1,256", "1,1024", "1,128"] and rows["bob"][4] == "1,128"
        scraped = controller.metrics_text()
        for line in ('gleaner_controller_tenant_allocated_vcpus{tenant="gold"} 1.0',
                     'gleaner_controller_tenant_lower_vcpus{tenant="gold"} 1.0',
                     'gleaner_controller_tenant_upper_vcpus{tenant="bob"} 1.0'):
            assert line in scraped, line
    remove_test_domains()
