"""A guest's progress through a real controller process over mutual TLS (issue 26 item 3): a
stand-in node's report stream (tests.controllerproc.reporting_node, the node's own certificate)
lists a backfill VM whose guest says `progress DONE TOTAL`; ListVms and `gleanctl vms` show it
per lease, ListTenants and `gleanctl tenant show` per batch tenant. A report past the bounds is
refused naming the field, audited, and changes nothing."""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time

import grpc
import pytest

from controller.core.goal_sizing import GOAL_INTERVAL_S
from gleaner_common.rpc import Role, channel_to
from protos import controller_pb2, controller_pb2_grpc
from tests.agentproc import REPO, TEST_PREFIX, LabEnv, wait_for
from tests.controllerproc import ControllerProcess, reporting_node
from tests.fake_agents import serve_fake_agent, stop_fake_agent

NODE = "progress-node"
VM = f"{TEST_PREFIX}progress-1"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return LabEnv.in_dir(tmp_path_factory.mktemp("progress-api"), nodes=(NODE,))


def report(address: str, done: int, total: int) -> controller_pb2.NodeReport:
    vm = controller_pb2.ReportedVm(name=VM, role="backfill", vm_role=controller_pb2.VM_ROLE_BACKFILL, state="running",
                                   vcpus=1, memory_mib=256, launched_at=time.time() - 60, image="tiny",
                                   work_state="busy", work_for_s=1.0, progress_done=done, progress_total=total,
                                   progress_for_s=1.0)
    return controller_pb2.NodeReport(node_id=NODE, agent_address=address, cpus=4, memory_mib=8192, images=["tiny"],
                                     min_memory_mib=32, sent_at=time.time(), agent_version="test", vms=[vm])


def gleanctl(controller: ControllerProcess, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "controller.gleanctl", *controller.gleanctl_args(), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    return done.stdout


def shown(controller: ControllerProcess) -> tuple[tuple[int, int], tuple[int, int]]:
    """(the VM's lease's progress in ListVms, the backfill tenant's in ListTenants)."""
    lease = next((l for l in controller.leases("backfill") if l.vm_name == VM), None)
    (tenant,) = controller.stub().ListTenants(controller_pb2.ListTenantsRequest(name="backfill"), timeout=10).tenants
    return ((lease.progress_done, lease.progress_total) if lease else (0, 0),
            (tenant.progress_done, tenant.progress_total))


def test_progress_is_shown_per_lease_and_per_batch_tenant_and_a_report_past_its_bounds_is_refused(env):
    agent, server = serve_fake_agent(env.pki, NODE, hung=False)
    controller = ControllerProcess(env, name="progress-ctl").start()
    address = f"127.0.0.1:{server.port}"
    said = {"done": 1, "total": 5}
    try:
        with reporting_node(controller, NODE, lambda: report(address, said["done"], said["total"])):
            wait_for(lambda: shown(controller) == ((1, 5), (1, 5)), 20, "the guest's 1/5 in ListVms and ListTenants")
            said["done"] = 3
            wait_for(lambda: shown(controller) == ((3, 5), (3, 5)), 20, "the guest's 3/5")
            vms = gleanctl(controller, "vms")
            header, *rows = vms.splitlines()
            assert header.split()[-1] == "PROGRESS"
            assert [row.split()[-1] for row in rows if VM in row] == ["3/5"], vms
            tenants = gleanctl(controller, "tenant", "show")
            header, *rows = tenants.splitlines()
            assert header.split()[-2:] == ["PROGRESS", "GOAL"]   # no goal: an empty GOAL cell
            cells = {row.split()[0]: row.split() for row in rows if not row.startswith("pool:")}
            assert cells["backfill"][-1] == "3/5" and cells["default"][-1] != "3/5", tenants
            data = json.loads(gleanctl(controller, "tenant", "show", "backfill", "-o", "json"))
            assert (data["tenants"][0]["progress_done"], data["tenants"][0]["progress_total"]) == (3, 5)

            # DONE past TOTAL, on a stream of the node's own: refused whole, naming the field
            stub = controller_pb2_grpc.ControllerStub(channel_to(Role.CONTROLLER, "", controller.address,
                                                                 env.pki.agent(NODE)))
            with pytest.raises(grpc.RpcError) as refused:
                stub.Report(iter([report(address, 9, 5)]), timeout=10)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "vms.progress_done" in refused.value.details() and "0..5" in refused.value.details()
            events = wait_for(lambda: controller.events("report.refused"), 10, "the refusal's audit")
            assert any("vms.progress_done" in e.detail_json for e in events), events
            time.sleep(1.5)   # the good stream reports three times more meanwhile
            assert shown(controller) == ((3, 5), (3, 5))   # nothing of the refused report was taken
    finally:
        controller.stop()
        stop_fake_agent(agent, server)


def science_report(controller: ControllerProcess, address: str, done: int) -> controller_pb2.NodeReport:
    """The node's report: science's backfill VMs (the controller launched them on the quick fake
    agent), each guest saying `progress DONE 1000`."""
    vms = [controller_pb2.ReportedVm(name=l.vm_name, lease_id=l.lease_id, role="backfill",
                                     vm_role=controller_pb2.VM_ROLE_BACKFILL, state="running", vcpus=l.vcpus,
                                     memory_mib=l.memory_mib, launched_at=time.time() - 60, image="tiny",
                                     progress_done=done, progress_total=1000, progress_for_s=1.0)
           for l in controller.leases("backfill") if l.owner == "science" and l.state in ("starting", "running")]
    return controller_pb2.NodeReport(node_id=NODE, agent_address=address, cpus=4, memory_mib=8192, images=["tiny"],
                                     min_memory_mib=32, sent_at=time.time(), agent_version="test", vms=vms)


def saved_progress(controller: ControllerProcess) -> dict:
    """The store's goal_progress row (the controller's goals job writes it), read beside the process."""
    with sqlite3.connect(controller.state_dir / "controller.sqlite3") as db:
        row = db.execute("SELECT value FROM settings WHERE key = 'goal_progress'").fetchone()
    return json.loads(row[0]) if row else {}


def test_a_goal_tenants_progress_history_outlives_a_controller_killed_and_started_again(env):
    """The goals job saves the progress book; a controller killed with SIGKILL (no clean stop, so
    no save on the way out) starts again with the history it had, and `tenant show` gives the
    tenant's progress before any guest has spoken again."""
    agent, server = serve_fake_agent(env.pki, NODE, hung=False)
    controller = ControllerProcess(env, name="progress-kill", settings=dict(use_prediction=False)).start()
    address = f"127.0.0.1:{server.port}"
    said = {"done": 0}
    try:
        with reporting_node(controller, NODE, lambda: science_report(controller, address, said["done"])):
            gleanctl(controller, "backfill", "set", "enabled=true", "vcpus=1", "memory_mb=256")
            gleanctl(controller, "tenant", "create", "science", "--kind", "batch", "--lower", "1,256",
                     "--upper", "2,512")
            gleanctl(controller, "tenant", "backfill", "backfill", "enabled=false")
            gleanctl(controller, "tenant", "goal", "science", "--work", "10", "--deadline", "+2h")
            wait_for(lambda: len([l for l in controller.leases("backfill", "running") if l.owner == "science"]) == 2,
                     30, "science's two volunteers running")
            for done in (10, 20):
                time.sleep(1.5)
                said["done"] = done
            wait_for(lambda: [s[1] for s in saved_progress(controller).get("science", {}).get("history", [])]
                     == [0, 10, 20], GOAL_INTERVAL_S + 30, "the goals job to save science's history", interval=2)
        before = saved_progress(controller)["science"]
        controller.process.kill()
        controller.process.wait(30)
        controller.process = None
        controller.start()
        data = json.loads(gleanctl(controller, "tenant", "show", "science", "-o", "json"))
        assert (data["tenants"][0]["progress_done"], data["tenants"][0]["progress_total"]) == (20, 1000)
        assert saved_progress(controller)["science"] == before
    finally:
        controller.stop()
        stop_fake_agent(agent, server)
