"""The work channel on the real libvirtd: backfill guests say when they are busy.

A backfill domain gets a virtio-serial port whose output virtlogd keeps in a file; the tiny
guest's jobs workload says `busy N` at each job's start and `idle N` after it. The agent lists
and reports the last statement and its age; the controller's idle_first takes it over the CPU
figures, so a VM that went from one job straight to the next is seen as its job's age, not
its own.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import grpc
import pytest

from pathlib import Path

from nodeagent.host.workchannel import channel_path
from protos import agent_pb2, controller_pb2
from tests.agentproc import (AgentProcess, console_text, launch_request, remove_test_domains, unique_name, wait_for,
                             wait_for_console)
from tests.controllerproc import ControllerProcess, agent_settings

pytestmark = pytest.mark.libvirt


def listed(stub, name: str) -> agent_pb2.Domain | None:
    return next((d for d in stub.ListDomains(agent_pb2.ListDomainsRequest()).domains if d.name == name), None)


def file_size(path) -> int | None:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return None


def test_a_backfill_guest_told_its_recycle_takes_no_job_it_could_not_finish(agent, stub):
    """gleaner.retire_after (issue 25): the tiny guest's jobs of 6 s stop before its 30 s of run
    time; it says idle (the controller recycles a VM idle in the last tenth of its life at once),
    and QEMU carries the same word as an SMBIOS OEM string for guests that boot from their disk."""
    name = unique_name("retire")
    stub.LaunchDomain(launch_request(name, kernel_cmdline="gleaner.workload=jobs gleaner.jobs=6,0",
                                     retire_after_seconds=30))
    console = agent.state_dir / "console" / f"{name}.log"
    wait_for_console(console, "GLEANER-RETIRED", 180)
    text = console_text(console)
    retired = re.search(r"GLEANER-RETIRED after job (\d+) at (\d+) s", text)
    assert retired, text[-600:]
    jobs, at = int(retired.group(1)), int(retired.group(2))
    assert 30 - 6 < at <= 30, text[-600:]   # it left only the job that would have ended past 30 s
    assert jobs >= 1 and text.count("GLEANER-JOB ") == jobs, text[-600:]   # and started none after it
    wait_for(lambda: listed(stub, name).work_state == "idle", 10, "the guest's idle word")
    assert listed(stub, name).retire_after_seconds == 30
    pid = int(Path(f"/run/libvirt/qemu/{name}.pid").read_text())
    assert b"type=11,value=gleaner.retire_after=30" in Path(f"/proc/{pid}/cmdline").read_bytes()
    stub.TerminateDomain(agent_pb2.TerminateDomainRequest(name=name, force=True))
    with pytest.raises(grpc.RpcError) as refused:   # an on-demand VM is released by its owner, never recycled
        stub.LaunchDomain(launch_request(unique_name("fgretire"), role=agent_pb2.ROLE_ON_DEMAND,
                                         retire_after_seconds=30))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "retire_after_seconds" in refused.value.details()


def test_the_agent_lists_what_a_backfill_guest_says_and_only_a_backfill_guest(agent, stub):
    volunteer, foreground = unique_name("jobs"), unique_name("fgjobs")
    jobs = "gleaner.workload=jobs gleaner.jobs=4,3"
    stub.LaunchDomain(launch_request(volunteer, kernel_cmdline=jobs))
    stub.LaunchDomain(launch_request(foreground, role=agent_pb2.ROLE_ON_DEMAND, kernel_cmdline=jobs))
    console = agent.state_dir / "console"
    # the whole ready line (a read may catch it half written: it failed once on "work_channel=/")
    wait_for_console(console / f"{volunteer}.log", "GLEANER-READY workload=jobs", 120)
    wait_for_console(console / f"{foreground}.log", "GLEANER-READY workload=jobs", 120)
    wait_for_console(console / f"{volunteer}.log", "work_channel=/dev/vport", 10)
    wait_for_console(console / f"{foreground}.log", "work_channel=none", 10)   # on-demand VMs have no port
    assert "work_channel=/dev/vport" in console_text(console / f"{volunteer}.log")
    assert "work_channel=none" in console_text(console / f"{foreground}.log")
    seen: list[tuple[str, float]] = []
    deadline = time.monotonic() + 25
    while time.monotonic() < deadline:
        seen.append((listed(stub, volunteer).work_state, listed(stub, volunteer).work_for_s))
        assert (listed(stub, foreground).work_state, listed(stub, foreground).work_for_s) == ("", 0.0)
        time.sleep(0.3)
    states = [state for state, _ in seen]
    changes = [i for i in range(1, len(seen)) if states[i] != states[i - 1]]
    assert {"busy", "idle"} <= set(states) and len(changes) >= 4, seen   # 4 s busy, 3 s idle, for 25 s
    # At a change the statement is fresh; within a spell its age grows (the agent times it).
    assert all(seen[i][1] < 2.5 for i in changes), seen
    assert max(age for state, age in seen if state == "busy") > 3.0, seen
    jobs_started = console_text(console / f"{volunteer}.log").count("GLEANER-JOB")
    assert jobs_started >= 3
    work_file = channel_path(console, volunteer)
    assert work_file.read_bytes().count(b"busy ") == jobs_started   # one statement per job, as the guest printed
    assert not channel_path(console, foreground).exists()
    stub.TerminateDomain(agent_pb2.TerminateDomainRequest(name=volunteer, force=True))
    stub.TerminateDomain(agent_pb2.TerminateDomainRequest(name=foreground, force=True))
    assert not work_file.exists()   # gone with its domain


def test_a_guest_flooding_its_channel_fills_no_disk_and_says_nothing(agent, stub):
    """A hostile backfill guest writing its port without end (about 1 MB/s under TCG): virtlogd
    keeps the file and 3 rotated copies of at most 2 MiB each (its defaults); the agent reads a
    line-less flood as no statement, logs a warning once, and removes every copy with the domain."""
    name = unique_name("flood")
    stub.LaunchDomain(launch_request(name, kernel_cmdline="gleaner.workload=flood"))
    console = agent.state_dir / "console"
    wait_for_console(console / f"{name}.log", "GLEANER-READY workload=flood", 120)
    work_file = channel_path(console, name)
    copies = lambda: sorted(console.glob(f"{work_file.name}*"))
    wait_for(lambda: len(copies()) == 4, 90, "the flood to fill the channel file three times over", interval=0.5)
    for _ in range(10):
        sizes = [size for size in map(file_size, copies()) if size is not None]   # (a rotation may be renaming them)
        assert len(sizes) <= 4 and max(sizes) <= 2 * 2**20, sizes
        assert (listed(stub, name).work_state, listed(stub, name).work_for_s) == ("", 0.0)
        time.sleep(0.5)
    stub.TerminateDomain(agent_pb2.TerminateDomainRequest(name=name, force=True))
    assert copies() == []
    warned = [line for line in agent.log_text().splitlines() if "event=guest.work_channel_noisy" in line]
    assert len([line for line in warned if name in line]) == 1   # told once, with where to look


def test_idle_first_stops_the_vm_whose_job_is_youngest_by_its_guests_word(test_env):
    """Two adopted backfill VMs, both always busy by the CPU figures: `chain` (older) runs a new
    2 s job after another, `long` (younger) one long job. By CPU alone idle_first, like
    most_recent, would stop `long`, busy for less time; by the guests' word `chain`'s job is the
    youngest, so it is the victim, and the audit says the clock came from the guest."""
    controller = ControllerProcess(test_env, name="ctl-work", settings=dict(use_prediction=False)).start()
    agent = AgentProcess(test_env, name="node1", settings=agent_settings(controller)).start()
    try:
        wait_for(lambda: controller.node_state("node1") == "up", 20, "node1 to report")
        subprocess.run([sys.executable, "-m", "controller.gleanctl", *controller.gleanctl_args(), "backfill", "set",
                        "termination_policy=idle_first", "interruption=terminate"], check=True, capture_output=True, timeout=60)
        console = agent.state_dir / "console"
        chain, long = unique_name("chain"), unique_name("long")
        agent.stub().LaunchDomain(launch_request(chain, kernel_cmdline="gleaner.workload=jobs gleaner.jobs=2,0"))
        wait_for_console(console / f"{chain}.log", "GLEANER-JOB 2 start", 120)
        agent.stub().LaunchDomain(launch_request(long, kernel_cmdline="gleaner.workload=jobs gleaner.jobs=600,0"))
        wait_for_console(console / f"{long}.log", "GLEANER-JOB 1 start", 120)
        leases = wait_for(lambda: {l.vm_name: l for l in controller.leases("backfill", "running")
                                   if l.vm_name in (chain, long)} if len([
                                       l for l in controller.leases("backfill", "running")
                                       if l.vm_name in (chain, long)]) == 2 else None, 30, "both VMs adopted")
        assert leases[chain].launched_at < leases[long].launched_at
        time.sleep(10)   # `long`'s job is now at least 10 s old; `chain`'s at most 2 s (plus report lag)
        assert listed(agent.stub(), long).work_for_s > 8.0

        reply = controller.stub().RequestVm(controller_pb2.VmRequest(vcpus=1, memory_mib=128, image="tiny",
                                                                     owner="alice", request_id="work-1"), timeout=120)
        assert reply.outcome == "placed", reply.reason
        assert [p.lease_id for p in reply.preempted] == [leases[chain].lease_id]
        (event,) = [e for e in controller.events("vm.preempting") if e.lease_id == leases[chain].lease_id]
        detail = json.loads(event.detail_json)
        assert detail["policy"] == "idle_first" and detail["clock"] == "guest" and detail["busy_for_s"] < 6, detail
    finally:
        agent.stop()
        controller.stop()
        remove_test_domains()
