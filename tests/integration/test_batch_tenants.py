"""Batch tenants own backfill (issue 26), on a real controller process.

- Two agents on libvirt's test:/// driver (16 CPUs each) as a pool of 32 vCPUs, URR 0.25: with an
  on-demand VM holding half the pool, the pool is busy, and two batch tenants with lower bounds
  of 2 and 6 vCPUs get their PSF shares, 1/4 and 3/4, of the 16 idle vCPUs.
- One agent on the local libvirtd offering 4 vCPUs per CPU: the same shares with real VMs.
- One agent on the local libvirtd: each batch tenant's real VMs boot with its own settings.
"""
from __future__ import annotations

import time
from collections import Counter

import pytest

from protos import agent_pb2, controller_pb2
from tests.agentproc import AgentProcess, remove_test_domains, wait_for, wait_for_console
from tests.controllerproc import ControllerProcess, agent_settings, fake_driver_pool, run_gleanctl as gleanctl

pytestmark = pytest.mark.libvirt


def backfill_by_owner(controller: ControllerProcess) -> Counter:
    return Counter(l.owner for l in controller.leases("backfill") if l.state in ("starting", "running"))


def test_two_batch_tenants_share_a_busy_pool_by_psf(test_env):
    with fake_driver_pool(test_env, "ctl-psf", use_prediction=False, tenants_urr=0.25) as (controller, _nodes):
        cpus = sum(n.cpus for n in controller.stub().ListNodes(controller_pb2.ListNodesRequest(), timeout=10).nodes)
        assert cpus == 32
        gleanctl(controller, "tenant", "create", "small", "--kind", "batch", "--lower", "2,256", "--upper", "16,4096")
        gleanctl(controller, "tenant", "create", "large", "--kind", "batch", "--lower", "6,768", "--upper", "16,4096")
        gleanctl(controller, "tenant", "backfill", "backfill", "enabled=false")   # the built-in tenant sits out
        gleanctl(controller, "tenant", "backfill", "large", "grace_seconds=3", code=2)   # the pool's, not a tenant's
        placed = controller.stub().RequestVm(controller_pb2.VmRequest(vcpus=16, memory_mib=1024, image="tiny",
                                                                      owner="web", request_id="psf-od"), timeout=60)
        assert placed.outcome == "placed", placed.reason

        gleanctl(controller, "backfill", "set", "enabled=true", "vcpus=1", "memory_mb=128")
        wait_for(lambda: sum(backfill_by_owner(controller).values()) >= 16, 60, "the idle half filled")
        assert backfill_by_owner(controller) == Counter(small=4, large=12)
        shown = gleanctl(controller, "tenant", "show").stdout
        rows = {line.split()[0]: line.split() for line in shown.splitlines()[1:] if line and not line.startswith("pool:")}
        assert rows["small"][4] == "4,512" and rows["large"][4] == "12,1536"


def test_each_batch_tenants_real_vms_boot_with_its_own_settings(test_env):
    controller = ControllerProcess(test_env, name="ctl-own", settings=dict(use_prediction=False)).start()
    agent = AgentProcess(test_env, name="own-node", settings=agent_settings(controller)).start()
    try:
        wait_for(lambda: controller.node_state("own-node") == "up", 30, "the node to report")
        gleanctl(controller, "tenant", "create", "science", "--kind", "batch", "--upper", "1,1024")
        gleanctl(controller, "tenant", "backfill", "science", "memory_mb=192", "max_instances=1")
        gleanctl(controller, "tenant", "backfill", "backfill", "max_instances=1")
        gleanctl(controller, "backfill", "set", "enabled=true", "memory_mb=128", "interruption=terminate")
        leases = wait_for(lambda: [l for l in controller.leases("backfill", "running")] if
                          len(controller.leases("backfill", "running")) == 2 else None, 120, "two backfill VMs")
        by_owner = {l.owner: l for l in leases}
        assert set(by_owner) == {"science", "backfill"}
        assert by_owner["science"].memory_mib == 192 and by_owner["backfill"].memory_mib == 128
        for lease in leases:
            wait_for_console(agent.state_dir / "console" / f"{lease.vm_name}.log", "GLEANER-READY", timeout=120)
        shown = gleanctl(controller, "tenant", "show", "science").stdout
        assert '"memory_mb": 192' in shown and by_owner["science"].lease_id in shown
        assert len(controller.leases("backfill")) == 2   # science's upper bound and max_instances hold
    finally:
        agent.stop()
        controller.stop()
        remove_test_domains()


def test_two_batch_tenants_real_vms_share_a_busy_node_by_psf(test_env):
    """One agent on the local libvirtd offering 4 vCPUs per CPU ([capacity] cpu_allocation_ratio 4:
    8 vCPUs on this 2-CPU host), URR 0.25. Two 2-vCPU on-demand VMs make the node busy (usage 0.5);
    tenants with lower bounds 1 and 3 vCPUs then get 1 and 3 of the 4 idle vCPUs as real VMs."""
    controller = ControllerProcess(test_env, name="ctl-psf-real",
                                   settings=dict(use_prediction=False, tenants_urr=0.25)).start()
    agent = AgentProcess(test_env, name="psf-real", settings=agent_settings(controller, cpu_allocation_ratio=4.0)).start()
    try:
        wait_for(lambda: controller.node_state("psf-real") == "up", 30, "the node to report")
        (node,) = controller.stub().ListNodes(controller_pb2.ListNodesRequest(), timeout=10).nodes
        assert node.cpus == 8   # 2 CPUs x 4
        gleanctl(controller, "tenant", "create", "small", "--kind", "batch", "--lower", "1,128", "--upper", "4,2048")
        gleanctl(controller, "tenant", "create", "large", "--kind", "batch", "--lower", "3,384", "--upper", "4,2048")
        gleanctl(controller, "tenant", "backfill", "backfill", "enabled=false")
        for i in (1, 2):   # 4 vCPUs of on-demand VMs (a domain has at most the host's 2 CPUs)
            placed = controller.stub().RequestVm(controller_pb2.VmRequest(
                vcpus=2, memory_mib=128, image="tiny", owner="web", request_id=f"psf-real-od{i}"), timeout=120)
            assert placed.outcome == "placed", placed.reason
        gleanctl(controller, "backfill", "set", "enabled=true", "vcpus=1", "memory_mb=128", "interruption=terminate")
        wait_for(lambda: sum(backfill_by_owner(controller).values()) >= 4, 120, "the idle vCPUs filled")
        time.sleep(2)   # more fills: nothing more is granted
        running = wait_for(lambda: controller.leases("backfill", "running")
                           if len(controller.leases("backfill", "running")) == 4 else None, 120, "four running VMs")
        assert Counter(l.owner for l in running) == Counter(small=1, large=3)
        names = {d.name for d in agent.stub().ListDomains(agent_pb2.ListDomainsRequest(), timeout=10).domains}
        assert {l.vm_name for l in running} <= names   # real domains on the local libvirtd
    finally:
        agent.stop()
        controller.stop()
        remove_test_domains()
