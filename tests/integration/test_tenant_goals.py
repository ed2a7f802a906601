"""Goal-driven sizing on a real controller process (issue 26, RHIC): two agents on libvirt's
test:/// driver (32 vCPUs). A batch tenant's deadline that 4 volunteers would meet takes every
volunteer it is granted (up to its upper bound) and `gleanctl tenant show` says on track with the
projected finish; once other backfill fills the pool, a deadline it cannot meet gets dedicated
(on-demand) VMs of its own within its lower bound, in the place of that backfill, and says at
risk; the controller's goals job sizes it again every interval on its own."""
from __future__ import annotations

import json
import re
import time

import pytest

from controller.core.goal_sizing import GOAL_INTERVAL_S
from nodeagent.host.workchannel import channel_path
from protos import agent_pb2, controller_pb2
from tests.agentproc import wait_for
from tests.controllerproc import fake_driver_pool, run_gleanctl as gleanctl

pytestmark = pytest.mark.libvirt


def science(controller: ControllerProcess, role: str) -> list:
    return [l for l in controller.leases(role) if l.owner == "science" and l.state in ("starting", "running")]


def test_a_goal_sizes_the_tenants_volunteers_and_dedicated_vms_and_show_says_where_it_stands(test_env):
    with fake_driver_pool(test_env, "ctl-goal", use_prediction=False) as (controller, _nodes):
        gleanctl(controller, "tenant", "create", "science", "--kind", "batch", "--lower", "4,1024",
                 "--upper", "16,4096")
        gleanctl(controller, "tenant", "backfill", "backfill", "enabled=false")
        gleanctl(controller, "tenant", "goal", "science", "--work", "8", "--deadline", "soon", code=2)
        gleanctl(controller, "tenant", "goal", "science", "--work", "-8", "--deadline", "+2h", code=2)
        gleanctl(controller, "tenant", "backfill", "science", "enabled=false")   # no VM before its goal
        gleanctl(controller, "backfill", "set", "enabled=true", "vcpus=1", "memory_mb=128")
        gleanctl(controller, "tenant", "goal", "science", "--work", "7", "--deadline", "+2h")   # 3.5 vCPUs: 4 volunteers
        gleanctl(controller, "tenant", "backfill", "science", "enabled=true")
        # it takes every volunteer it is granted, up to its upper bound (16 of the pool's 32)
        wait_for(lambda: len(science(controller, "backfill")) == 16, 60, "science's sixteen volunteers")
        time.sleep(2)   # more fills: its upper bound holds
        assert len(science(controller, "backfill")) == 16 and not science(controller, "on_demand")
        shown = gleanctl(controller, "tenant", "show", "science").stdout
        assert "on track, finish 20" in shown and "met by volunteers alone" in shown and "(4 would do)" in shown, shown

        # the built-in tenant's backfill takes the rest of the pool; science's upper bound is raised
        # past what it holds and its deadline put out of reach: dedicated VMs within its lower bound
        # take room back from the built-in tenant's backfill
        gleanctl(controller, "tenant", "backfill", "backfill", "enabled=true")
        wait_for(lambda: sum(l.vcpus for l in controller.leases("backfill", "running")) == 32, 60, "a full pool")
        gleanctl(controller, "tenant", "set", "science", "--upper", "24,6144")
        gleanctl(controller, "tenant", "goal", "science", "--work", "1000", "--deadline", "+1h")
        wait_for(lambda: len(science(controller, "on_demand")) == 4, 60, "four dedicated VMs")
        assert all(l.vcpus == 1 for l in science(controller, "on_demand"))
        shown = gleanctl(controller, "tenant", "show", "science").stdout
        assert "at risk, finish 20" in shown and "dedicated 4 vCPUs" in shown, shown
        risk = [json.loads(e.detail_json) for e in controller.events("tenant.goal_at_risk")]
        assert risk and risk[-1]["tenant"] == "science" and risk[-1]["dedicated_vcpus"] == 4
        # the controller's goals job sizes it again within its interval, with no command or
        # fill asking (no progress said: its projected finish moves on with the clock)
        finish = lambda: re.search(r"finish (\S+)", gleanctl(controller, "tenant", "show", "science").stdout)[1]  # noqa: E731
        before = finish()
        wait_for(lambda: finish() != before, GOAL_INTERVAL_S + 30, "the goals job's next sizing", interval=2)

        gleanctl(controller, "tenant", "goal", "science", "--clear")
        assert "GOAL" in gleanctl(controller, "tenant", "show").stdout


def test_a_goals_dedicated_vms_say_its_progress_and_a_plain_on_demand_vm_is_not_read(test_env):
    """A job run on dedicated VMs alone (backfill holds the rest of the pool) is heard: the
    controller asks the agent for the work channel for each dedicated VM, the agent reads what its
    guest wrote there and reports it, and the books file it under the tenant. An on-demand VM's
    file of the same kind is never read. (test:/// domains have no guest: the test writes the
    files the guests' ports would; the real guest's side is test_work_channel_progress.py's.)"""
    with fake_driver_pool(test_env, "ctl-goal-say", use_prediction=False) as (controller, agents):
        gleanctl(controller, "tenant", "create", "science", "--kind", "batch", "--lower", "4,1024",
                 "--upper", "8,2048")
        gleanctl(controller, "tenant", "backfill", "science", "max_instances=2")   # room for its dedicated VMs
        gleanctl(controller, "backfill", "set", "enabled=true", "vcpus=1", "memory_mb=128")
        wait_for(lambda: sum(l.vcpus for l in controller.leases("backfill", "running")) == 32, 60, "a full pool")
        plain = gleanctl(controller, "--json", "request", "--vcpus", "1", "--memory", "128",
                         "--request-id", "plain-1")
        plain_vm = json.loads(plain.stdout)["lease"]["vm_name"]
        gleanctl(controller, "tenant", "goal", "science", "--work", "1000", "--deadline", "+1h")
        wait_for(lambda: len([l for l in science(controller, "on_demand") if l.state == "running"]) == 4, 60,
                 "four dedicated VMs running")
        consoles = {agent.name: agent.state_dir / "console" for agent in agents}
        plain_lease = next(l for l in controller.leases("on_demand") if l.vm_name == plain_vm)
        channel_path(consoles[plain_lease.node_id], plain_vm).write_text("progress 999 1000\nidle 9\n")
        for lease in science(controller, "on_demand"):
            channel_path(consoles[lease.node_id], lease.vm_name).write_text("progress 40 100\nidle 40\n")

        def tenant_progress() -> tuple[int, int]:
            (tenant,) = controller.stub().ListTenants(controller_pb2.ListTenantsRequest(name="science"),
                                                      timeout=10).tenants
            return tenant.progress_done, tenant.progress_total
        wait_for(lambda: tenant_progress() == (40, 100), 30, "science's progress from its dedicated VMs")
        leases = {l.vm_name: l for l in controller.leases()}
        assert all((leases[l.vm_name].progress_done, leases[l.vm_name].progress_total) == (40, 100)
                   for l in science(controller, "on_demand"))
        assert (leases[plain_vm].progress_done, leases[plain_vm].progress_total) == (0, 0)
        agent = next(a for a in agents if a.name == plain_lease.node_id)
        domains = {d.name: d for d in agent.stub().ListDomains(agent_pb2.ListDomainsRequest(), timeout=10).domains}
        assert (domains[plain_vm].progress_total, domains[plain_vm].work_state) == (0, "")   # never read
        shown = gleanctl(controller, "tenant", "show", "science").stdout
        assert "40/100" in shown, shown
