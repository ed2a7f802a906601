"""The agent's domain lifecycle on the real libvirtd with real QEMU (TCG) guests."""
from __future__ import annotations

import json
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import grpc
import pytest

from nodeagent.host.domainxml import NAMESPACE
from protos import agent_pb2
from tests.agentproc import (AgentProcess, console_text, domain_names, launch_request, restart_libvirtd,
                             unique_name, wait_for, wait_for_console)

READY = "GLEANER-READY"
CLEAN_SHUTDOWN_LINE = "GLEANER-SHUTDOWN power button pressed: shutting down cleanly"


def virsh(*args: str) -> str:
    return subprocess.run(["virsh", "-c", "qemu:///system", *args], check=True, capture_output=True,
                          text=True).stdout


def listed(stub) -> dict[str, agent_pb2.Domain]:
    return {d.name: d for d in stub.ListDomains(agent_pb2.ListDomainsRequest()).domains}


def overlay_of(agent: AgentProcess, name: str) -> Path:
    return agent.state_dir / "overlays" / f"{name}.qcow2"


def test_launches_foreground_and_volunteer_with_their_roles(agent, stub):
    fg, vol = unique_name("fg"), unique_name("vol")
    fg_reply = stub.LaunchDomain(launch_request(fg, agent_pb2.ROLE_ON_DEMAND, lease_id="lease-fg-1"))
    vol_reply = stub.LaunchDomain(launch_request(vol, agent_pb2.ROLE_BACKFILL, kernel_cmdline="gleaner.workload=hog"))
    assert fg_reply.created and vol_reply.created
    wait_for_console(fg_reply.domain.console_log, READY)
    wait_for_console(vol_reply.domain.console_log, "GLEANER-READY workload=hog")

    domains = listed(stub)
    assert domains[fg].role == agent_pb2.ROLE_ON_DEMAND
    assert domains[vol].role == agent_pb2.ROLE_BACKFILL
    assert domains[fg].lease_id == "lease-fg-1"
    for name in (fg, vol):
        assert domains[name].state == agent_pb2.DOMAIN_STATE_RUNNING
        assert domains[name].vcpus == 1 and domains[name].memory_mib == 128
        assert domains[name].cpu_time_ns > 0
        assert domains[name].launched_at.seconds > time.time() - 300

    # What a plain virsh shows: the role lives in the domain's own metadata, and the
    # domain type is the configured one.
    for name, role in ((fg, "foreground"), (vol, "volunteer")):
        root = ET.fromstring(virsh("dumpxml", name))
        assert root.get("type") == "qemu"
        assert root.findtext(f"metadata/{{{NAMESPACE}}}instance/{{{NAMESPACE}}}role") == role
        disk = root.find("devices/disk/source").get("file")
        assert disk == str(overlay_of(agent, name))
    info = json.loads(subprocess.run(["qemu-img", "info", "-U", "--output=json", str(overlay_of(agent, vol))],
                                     check=True, capture_output=True, text=True).stdout)
    assert info["backing-filename"].endswith("tiny/disk.qcow2")
    # The log says what each step of the launch took: what an admin looks at when launches are slow.
    line = next(l for l in agent.log_text().splitlines() if "event=domain.launched" in l and f"domain={fg}" in l)
    steps = dict(part.split("=") for part in line.split('steps_ms="')[1].split('"')[0].split(","))
    assert list(steps) == ["overlay", "define", "start", "mark_started", "read_back", "class"]
    assert all(int(ms) >= 0 for ms in steps.values())


def test_launch_is_idempotent_and_refuses_a_different_spec(stub):
    name = unique_name("idem")
    first = stub.LaunchDomain(launch_request(name))
    again = stub.LaunchDomain(launch_request(name))
    assert first.created and not again.created
    assert again.domain.uuid == first.domain.uuid
    with pytest.raises(grpc.RpcError) as err:
        stub.LaunchDomain(launch_request(name, vcpus=2))
    assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert "vcpus is 1, not 2" in err.value.details()


def test_graceful_terminate_shuts_the_guest_down_cleanly(agent, stub):
    name = unique_name("clean")
    reply = stub.LaunchDomain(launch_request(name))
    wait_for_console(reply.domain.console_log, READY)
    result = stub.TerminateDomain(agent_pb2.TerminateDomainRequest(name=name))
    assert result.outcome == agent_pb2.TERMINATION_OUTCOME_CLEAN_SHUTDOWN, result.detail
    assert 0 < result.duration_seconds < 10
    assert CLEAN_SHUTDOWN_LINE in console_text(reply.domain.console_log)
    assert name not in domain_names()
    assert not overlay_of(agent, name).exists()


def test_guest_ignoring_the_power_button_is_destroyed_after_the_grace_period(agent, stub):
    name = unique_name("stubborn")
    reply = stub.LaunchDomain(launch_request(name, kernel_cmdline="gleaner.acpi=ignore"))
    wait_for_console(reply.domain.console_log, "GLEANER-ACPI ignoring the power button")
    wait_for_console(reply.domain.console_log, READY)
    result = stub.TerminateDomain(agent_pb2.TerminateDomainRequest(name=name, grace_seconds=3))
    assert result.outcome == agent_pb2.TERMINATION_OUTCOME_DESTROYED_AFTER_GRACE, result.detail
    assert 3 <= result.duration_seconds < 8
    assert "3s grace period" in result.detail
    assert CLEAN_SHUTDOWN_LINE not in console_text(reply.domain.console_log)
    assert name not in domain_names()
    assert not overlay_of(agent, name).exists()


def test_force_destroys_at_once(agent, stub):
    name = unique_name("force")
    stub.LaunchDomain(launch_request(name))
    result = stub.TerminateDomain(agent_pb2.TerminateDomainRequest(name=name, force=True))
    assert result.outcome == agent_pb2.TERMINATION_OUTCOME_DESTROYED_FORCED
    assert result.duration_seconds < 3
    assert name not in domain_names()
    assert not overlay_of(agent, name).exists()


def test_volunteer_that_powers_off_by_itself_is_reaped_but_foreground_stays(agent, stub):
    vol, fg = unique_name("selfoff-vol"), unique_name("selfoff-fg")
    replies = [stub.LaunchDomain(launch_request(n, role)) for n, role in
               ((vol, agent_pb2.ROLE_BACKFILL), (fg, agent_pb2.ROLE_ON_DEMAND))]
    for reply in replies:
        wait_for_console(reply.domain.console_log, READY)
    for name in (vol, fg):  # pressed from outside the agent, as an admin or the guest might
        virsh("shutdown", name, "--mode", "acpi")
    wait_for(lambda: vol not in domain_names(), 30, f"the agent to reap {vol}")
    # the reaper undefines the domain, then deletes its files: the overlay goes a moment later
    wait_for(lambda: not overlay_of(agent, vol).exists(), 5, f"the agent to delete {vol}'s overlay")
    wait_for(lambda: listed(stub)[fg].state == agent_pb2.DOMAIN_STATE_SHUTOFF, 30, f"{fg} to stop")
    assert overlay_of(agent, fg).exists()  # a foreground VM's disk is its owner's until terminated
    result = stub.TerminateDomain(agent_pb2.TerminateDomainRequest(name=fg))
    assert result.outcome == agent_pb2.TERMINATION_OUTCOME_ALREADY_STOPPED
    assert not overlay_of(agent, fg).exists()


def test_restarted_agent_lists_the_same_domains_and_roles(test_env):
    agent = AgentProcess(test_env, name="restart").start()
    try:
        fg, vol = unique_name("keep-fg"), unique_name("keep-vol")
        stub = agent.stub()
        stub.LaunchDomain(launch_request(fg, agent_pb2.ROLE_ON_DEMAND, lease_id="L-42"))
        stub.LaunchDomain(launch_request(vol, agent_pb2.ROLE_BACKFILL))
        before = listed(stub)
        agent.stop()
        agent.start()
        after = listed(agent.stub())
        for name in (fg, vol):
            for attr in ("uuid", "role", "lease_id", "launched_at", "image", "vcpus", "memory_mib"):
                assert getattr(after[name], attr) == getattr(before[name], attr), (name, attr)
        assert after[fg].lease_id == "L-42"
    finally:
        agent.stop()


def test_agent_keeps_working_across_a_libvirtd_restart(agent, stub):
    name = unique_name("survivor")
    reply = stub.LaunchDomain(launch_request(name))
    wait_for_console(reply.domain.console_log, READY)
    restart_libvirtd()
    domains = listed(stub)  # the first call after the restart must heal the connection
    assert domains[name].state == agent_pb2.DOMAIN_STATE_RUNNING
    assert "libvirt.reconnected" in agent.log_text()
    second = unique_name("after-restart")
    assert stub.LaunchDomain(launch_request(second)).created
    result = stub.TerminateDomain(agent_pb2.TerminateDomainRequest(name=name))
    assert result.outcome == agent_pb2.TERMINATION_OUTCOME_CLEAN_SHUTDOWN


def test_describe_host_reports_this_host(stub):
    host = stub.DescribeHost(agent_pb2.DescribeHostRequest())
    assert host.cpus >= 1 and host.memory_mib > 1024
    assert host.libvirt_version.count(".") == 2 and host.qemu_version.count(".") == 2
    assert host.domain_type == "qemu"
    v2 = Path("/sys/fs/cgroup/cgroup.controllers").exists()
    assert host.cgroup_version == (2 if v2 else 1)
    if not v2:  # cgroup v1 keeps cpu.idle beside cpu.shares in the cpu hierarchy
        assert host.cpu_idle_supported == Path("/sys/fs/cgroup/cpu/cpu.idle").exists()
