"""A backfill guest's `progress DONE TOTAL` on the real libvirtd (issue 26 item 3): the tiny guest's
jobs workload with gleaner.jobs_total=5 says `progress N 5` after each job; virtlogd keeps it in
the work channel's file, the agent lists and reports it, and the controller shows it rising per
lease (ListVms) and for the VM's batch tenant (`gleanctl tenant show backfill`)."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time

import pytest

from nodeagent.host.workchannel import channel_path
from protos import agent_pb2, controller_pb2
from tests.agentproc import (REPO, SYSTEM_IMAGE_DIR, AgentProcess, console_text, launch_request, remove_test_domains,
                             unique_name, wait_for, wait_for_console)
from tests.controllerproc import ControllerProcess, agent_settings

pytestmark = pytest.mark.libvirt


def require_current_guest() -> None:
    """The guest's init says progress only from this tree's sources on: an image built before
    them would fail below without saying why."""
    spec = importlib.util.spec_from_file_location("image_build", REPO / "images" / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    manifest = SYSTEM_IMAGE_DIR / "tiny" / "manifest.json"
    key = json.loads(manifest.read_text()).get("cache_key", "")
    if not key.endswith(f"/{build.sources_digest()}"):
        pytest.fail(f"the guest image {manifest.parent} was built from other guest sources (its key {key!r}); "
                    "rebuild it: 'bash scripts/setup.sh' (or images/build.py --out DIR and GLEANER_IMAGE_DIR=DIR)",
                    pytrace=False)


def test_a_backfill_guests_progress_rises_in_the_controllers_leases_and_its_tenant(test_env):
    require_current_guest()
    controller = ControllerProcess(test_env, name="ctl-progress", settings=dict(use_prediction=False)).start()
    agent = AgentProcess(test_env, name="node1", settings=agent_settings(controller)).start()
    try:
        wait_for(lambda: controller.node_state("node1") == "up", 20, "node1 to report")
        name = unique_name("progress")
        agent.stub().LaunchDomain(launch_request(
            name, kernel_cmdline="gleaner.workload=jobs gleaner.jobs=2,0 gleaner.jobs_total=5"))
        console = agent.state_dir / "console"
        wait_for_console(console / f"{name}.log", "GLEANER-JOB 1 start", 120)
        seen: list[tuple[int, int]] = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and seen[-1:] != [(5, 5)]:
            lease = next((l for l in controller.leases("backfill") if l.vm_name == name), None)
            if lease is not None and (not seen or seen[-1] != (lease.progress_done, lease.progress_total)):
                seen.append((lease.progress_done, lease.progress_total))
            time.sleep(0.2)
        said = [pair for pair in seen if pair != (0, 0)]
        assert said and said[-1] == (5, 5), (seen, console_text(console / f"{name}.log")[-800:])
        assert len(said) >= 3 and all(total == 5 for _, total in said), seen   # it rose, job by job
        assert [done for done, _ in said] == sorted(done for done, _ in said), seen
        assert "GLEANER-JOBS-DONE 5 of 5" in console_text(console / f"{name}.log")

        # the agent's own listing, and the file virtlogd keeps: one progress line per job, before its idle
        domain = next(d for d in agent.stub().ListDomains(agent_pb2.ListDomainsRequest()).domains if d.name == name)
        assert (domain.progress_done, domain.progress_total, domain.work_state) == (5, 5, "idle")
        lines = channel_path(console, name).read_bytes().decode().splitlines()
        assert [l for l in lines if l.startswith("progress")] == [f"progress {n} 5" for n in range(1, 6)], lines
        assert lines[-2:] == ["progress 5 5", "idle 5"], lines

        # the batch tenant the VM's lease belongs to (the built-in backfill tenant owns adopted backfill)
        (tenant,) = controller.stub().ListTenants(controller_pb2.ListTenantsRequest(name="backfill"),
                                                  timeout=10).tenants
        assert (tenant.progress_done, tenant.progress_total) == (5, 5)
        shown = subprocess.run([sys.executable, "-m", "controller.gleanctl", *controller.gleanctl_args(), "tenant",
                                "show", "backfill"], cwd=REPO, capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0, shown.stderr
        header, row = shown.stdout.splitlines()[:2]
        assert header.split()[-2:] == ["PROGRESS", "GOAL"] and row.split()[0] == "backfill" and row.split()[-1] == "5/5", \
            shown.stdout
        agent.stub().TerminateDomain(agent_pb2.TerminateDomainRequest(name=name, force=True))
    finally:
        agent.stop()
        controller.stop()
        remove_test_domains()


def test_a_dedicated_vms_guest_says_progress_on_the_port_a_plain_on_demand_vm_lacks(agent, stub):
    """A goal's dedicated VM is on-demand (foreground) and runs its tenant's job: launched with
    work_channel, it gets the port, and the agent lists what its guest says there as it does a
    volunteer's. The same guest on an on-demand VM launched without it has no port and says
    nothing (the controller's side: test_tenant_goals.py and test_goal_sizing_ledger.py)."""
    require_current_guest()
    dedicated, plain = unique_name("dedjobs"), unique_name("odjobs")
    jobs = "gleaner.workload=jobs gleaner.jobs=2,0 gleaner.jobs_total=3"
    stub.LaunchDomain(launch_request(dedicated, role=agent_pb2.ROLE_ON_DEMAND, kernel_cmdline=jobs, work_channel=True))
    stub.LaunchDomain(launch_request(plain, role=agent_pb2.ROLE_ON_DEMAND, kernel_cmdline=jobs))
    console = agent.state_dir / "console"
    wait_for_console(console / f"{dedicated}.log", "GLEANER-READY workload=jobs", 120)
    wait_for_console(console / f"{plain}.log", "GLEANER-READY workload=jobs", 120)
    wait_for_console(console / f"{dedicated}.log", "work_channel=/dev/vport", 10)
    wait_for_console(console / f"{plain}.log", "work_channel=none", 10)

    def listed(name: str) -> agent_pb2.Domain:
        return next(d for d in stub.ListDomains(agent_pb2.ListDomainsRequest()).domains if d.name == name)
    wait_for(lambda: (listed(dedicated).progress_done, listed(dedicated).progress_total) == (3, 3), 90,
             f"{dedicated}'s guest to say its three jobs done")
    assert listed(dedicated).role == agent_pb2.ROLE_ON_DEMAND and listed(dedicated).work_state == "idle"
    lines = channel_path(console, dedicated).read_bytes().decode().splitlines()
    assert [l for l in lines if l.startswith("progress")] == [f"progress {n} 3" for n in range(1, 4)], lines
    wait_for_console(console / f"{plain}.log", "GLEANER-JOBS-DONE 3 of 3", 60)   # it ran the same jobs
    assert (listed(plain).progress_done, listed(plain).progress_total, listed(plain).work_state) == (0, 0, "")
    assert not channel_path(console, plain).exists()
    for name in (dedicated, plain):
        stub.TerminateDomain(agent_pb2.TerminateDomainRequest(name=name, force=True))
    assert not channel_path(console, dedicated).exists()   # gone with its domain
