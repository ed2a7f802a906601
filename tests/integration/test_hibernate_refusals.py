"""Hibernation refuses what it must, and changes nothing when it does (attacks and limits).

Each refusal is checked on the real agent (mutual TLS, the controller's identity) with its status
code, and with the state it must leave unchanged: the domain still running, no state file made,
nothing written outside the hibernation directory.
"""
from __future__ import annotations

import os
import time

import grpc
import libvirt
import pytest

from protos import agent_pb2
from tests.agentproc import (LIBVIRT_URI, AgentProcess, launch_request, remove_test_domains, unique_name, wait_for)

pytestmark = pytest.mark.libvirt


def refused(call) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    return caught.value.code(), caught.value.details()


def running(name: str) -> bool:
    conn = libvirt.open(LIBVIRT_URI)
    try:
        dom = conn.lookupByName(name)
        return dom.state()[0] == libvirt.VIR_DOMAIN_RUNNING
    finally:
        conn.close()


def hibernate(stub, name: str):
    return lambda: stub.HibernateDomain(agent_pb2.HibernateDomainRequest(name=name), timeout=60)


def resume(stub, name: str):
    return lambda: stub.ResumeDomain(agent_pb2.ResumeDomainRequest(name=name), timeout=60)


def test_names_on_demand_vms_and_stopped_vms_are_refused_and_nothing_changes(agent, stub):
    directory = agent.state_dir / "hibernation"
    for bad in ("../../etc/passwd", "a/b", "", "x" * 64, "-lead"):
        for call in (hibernate(stub, bad), resume(stub, bad)):
            assert refused(call)[0] == grpc.StatusCode.INVALID_ARGUMENT, bad
    ghost = unique_name("ghost")
    assert refused(hibernate(stub, ghost))[0] == grpc.StatusCode.NOT_FOUND
    assert refused(resume(stub, ghost))[0] == grpc.StatusCode.NOT_FOUND

    on_demand, backfill = unique_name("od"), unique_name("bf")
    stub.LaunchDomain(launch_request(on_demand, role=agent_pb2.ROLE_ON_DEMAND))
    stub.LaunchDomain(launch_request(backfill))
    code, details = refused(hibernate(stub, on_demand))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "on-demand" in details, details
    assert refused(resume(stub, on_demand))[0] == grpc.StatusCode.FAILED_PRECONDITION
    assert running(on_demand)
    # a running backfill VM that was never hibernated: resuming it is a no-op
    assert stub.ResumeDomain(agent_pb2.ResumeDomainRequest(name=backfill), timeout=60).resumed is False
    assert list(directory.iterdir()) == []


def test_a_symlink_at_the_state_files_path_is_never_written_through(agent, stub, tmp_path):
    """Someone with root put a symlink where the state file goes, to have libvirtd (root)
    overwrite another file: the save is refused, the target is untouched, the domain runs on,
    and the reaper removes the symlink (never its target)."""
    name = unique_name("link")
    stub.LaunchDomain(launch_request(name))
    target = tmp_path / "precious"
    target.write_text("keep me")
    link = agent.state_dir / "hibernation" / f"{name}.save"
    link.symlink_to(target)
    code, details = refused(hibernate(stub, name))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "symlink" in details, details
    assert target.read_text() == "keep me" and running(name)
    wait_for(lambda: not link.is_symlink(), 10, "the reaper to remove the planted symlink")
    assert target.read_text() == "keep me"


def test_a_hibernation_directory_replaced_by_a_symlink_is_refused(test_env, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    proc = AgentProcess(test_env, name="hib-dirlink",
                        settings=dict(hibernation_directory=str(test_env.root / "hib-dirlink-states")))
    proc.start()
    try:
        stub = proc.stub()
        name = unique_name("dirlink")
        stub.LaunchDomain(launch_request(name))
        states = test_env.root / "hib-dirlink-states"
        assert states.is_dir() and oct(states.stat().st_mode & 0o777) == "0o700"
        states.rmdir()
        states.symlink_to(elsewhere)
        code, details = refused(hibernate(stub, name))
        assert code == grpc.StatusCode.FAILED_PRECONDITION and "symlink" in details, details
        assert list(elsewhere.iterdir()) == [] and running(name)
    finally:
        proc.stop()
        remove_test_domains()


@pytest.mark.parametrize("settings, words", [
    (dict(hibernation_budget_mib=100), ("hibernation.budget_mib", "100 MiB", "needs up to 129 MiB")),
    (dict(hibernation_disk_reserve_mib=2**30), ("hibernation.disk_reserve_mib", "MiB free")),
    (dict(hibernation_budget_mib=0), ("hibernation is off", "budget_mib = 0")),
])
def test_a_save_past_the_budget_or_the_disk_reserve_is_refused_before_it_starts(test_env, settings, words):
    proc = AgentProcess(test_env, name=f"hib-budget-{os.getpid() % 1000}", settings=settings).start()
    try:
        stub = proc.stub()
        name = unique_name("big")
        stub.LaunchDomain(launch_request(name, memory_mib=128))
        started = time.monotonic()
        code, details = refused(hibernate(stub, name))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, details
        assert all(word in details for word in words), details
        assert time.monotonic() - started < 5   # refused before any save began
        assert running(name) and list((proc.state_dir / "hibernation").iterdir()) == []
        host = stub.DescribeHost(agent_pb2.DescribeHostRequest())
        assert host.hibernation_budget_bytes == proc_budget(settings) and host.hibernation_used_bytes == 0
        assert "event=hibernate.started" not in proc.log_text()
    finally:
        proc.stop()
        remove_test_domains()


def proc_budget(settings: dict) -> int:
    return settings.get("hibernation_budget_mib", 32768) * 2**20
