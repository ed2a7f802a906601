"""A guest's progress through a real controller process over mutual TLS (issue 26 item 3): a
stand-in node's report stream (tests.controllerproc.reporting_node, the node's own certificate)
lists a backfill VM whose guest says `progress DONE TOTAL`; ListVms and `gleanctl vms` show it
per lease, ListTenants and `gleanctl tenant show` per batch tenant. A report past the bounds is
refused naming the field, audited, and changes nothing."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import grpc
import pytest

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
