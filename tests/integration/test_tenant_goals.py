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
