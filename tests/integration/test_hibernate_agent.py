"""Hibernation on the real libvirtd: a backfill guest saved and restored through the agent's gRPC API.

A real agent process (mutual TLS, the controller's identity) hibernates a TCG guest running the
jobs workload and resumes it; its jobs go on where they were (the work channel and the console
show no job started again), its reported CPU time goes on from where it was, and it never runs
a moment outside the volunteer class: the agent is held at `resume.before_run` (restored, paused,
settings on) while the test reads the domain's real cgroup.
"""
from __future__ import annotations

import os
import re
import threading
import time

import grpc
import libvirt
import pytest

from nodeagent.host.workchannel import channel_path
from protos import agent_pb2
from tests.agentproc import (LIBVIRT_URI, AgentProcess, console_text, domain_cgroup_dir, launch_request,
                             read_cgroup_int, remove_test_domains, unique_name, wait_for, wait_for_console)

pytestmark = pytest.mark.libvirt
JOBS = "gleaner.workload=jobs gleaner.jobs=3,1"   # 3 s busy, 1 s idle, numbered jobs


def listed(stub, name: str) -> agent_pb2.Domain | None:
    return next((d for d in stub.ListDomains(agent_pb2.ListDomainsRequest()).domains if d.name == name), None)


def code_of(call) -> tuple[grpc.StatusCode, str]:
    try:
        call()
    except grpc.RpcError as exc:
        return exc.code(), exc.details()
    return grpc.StatusCode.OK, ""


def libvirt_state(name: str) -> tuple[bool, int]:
    """(active, libvirt state number) of the domain, straight from libvirtd."""
    conn = libvirt.open(LIBVIRT_URI)
    try:
        dom = conn.lookupByName(name)
        return bool(dom.isActive()), dom.state()[0]
    finally:
        conn.close()


def jobs_started(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"GLEANER-JOB (\d+) start", text)]


@pytest.fixture
def held_agent(test_env):
    """An agent that waits 4 s at resume.before_run: restored, settings on, still paused."""
    proc = AgentProcess(test_env, name=f"hib-{os.getpid() % 1000}-held")
    proc.start(env={"GLEANER_AGENT_PAUSE_AT": "resume.before_run:4"})
    yield proc
    proc.stop()
    remove_test_domains()


def test_a_hibernated_guest_resumes_its_jobs_where_they_were_and_never_runs_outside_its_class(held_agent):
    agent, stub = held_agent, held_agent.stub()
    name = unique_name("hib")
    stub.LaunchDomain(launch_request(name, kernel_cmdline=JOBS))
    console = agent.state_dir / "console"
    wait_for_console(console / f"{name}.log", "GLEANER-JOB 2 start", 120)
    cpu_before = listed(stub, name).cpu_time_ns

    saved = stub.HibernateDomain(agent_pb2.HibernateDomainRequest(name=name), timeout=120)
    state_file = agent.state_dir / "hibernation" / f"{name}.save"
    assert saved.saved and saved.state_bytes > 1 << 20 and state_file.is_file(), saved
    assert state_file.open("rb").read(16) == b"LibvirtQemudSave"
    assert libvirt_state(name)[0] is False   # stopped, still defined
    jobs_at_save = jobs_started(console_text(console / f"{name}.log"))
    domain = listed(stub, name)
    assert domain.state == agent_pb2.DOMAIN_STATE_HIBERNATED and domain.hibernated_bytes == saved.state_bytes
    assert domain.hibernated_at.seconds > 0
    again = stub.HibernateDomain(agent_pb2.HibernateDomainRequest(name=name), timeout=60)
    assert (again.saved, again.state_bytes) == (False, saved.state_bytes)   # idempotent

    # Asleep, the work clock stands still, and the reaper (every second) leaves it and its overlay alone.
    clock = listed(stub, name).work_for_s
    time.sleep(3)
    assert abs(listed(stub, name).work_for_s - clock) < 0.5
    assert listed(stub, name).slept_s >= 3
    assert (agent.state_dir / "overlays" / f"{name}.qcow2").is_file() and state_file.is_file()

    seen: list[tuple[int, int]] = []   # (libvirt state, cpu.idle) while the resume runs
    reply: list = []
    worker = threading.Thread(target=lambda: reply.append(
        stub.ResumeDomain(agent_pb2.ResumeDomainRequest(name=name), timeout=120)))
    worker.start()
    while worker.is_alive():
        active, state = libvirt_state(name)
        if active:
            try:
                seen.append((state, read_cgroup_int(domain_cgroup_dir(name), "cpu.idle")))
            except (AssertionError, FileNotFoundError):
                pass   # its cgroup is being made
        time.sleep(0.05)
    worker.join()
    resumed = reply[0]
    assert resumed.resumed and resumed.domain.state == agent_pb2.DOMAIN_STATE_RUNNING
    paused = [idle for state, idle in seen if state == libvirt.VIR_DOMAIN_PAUSED]
    running = [idle for state, idle in seen if state == libvirt.VIR_DOMAIN_RUNNING]
    assert paused and paused[-1] == 1, seen        # restored paused; cpu.idle on before it ran
    assert all(idle == 1 for idle in running), seen  # never a moment at normal priority
    assert read_cgroup_int(domain_cgroup_dir(name), "cpu.idle") == 1
    assert not state_file.exists()

    # Its jobs continue: the next job starts, no job starts again, the guest did not boot again.
    following = max(jobs_at_save) + 1
    wait_for_console(console / f"{name}.log", f"GLEANER-JOB {following} start", 60)
    text = console_text(console / f"{name}.log")
    assert jobs_started(text) == list(range(1, following + 1)) and text.count("GLEANER-READY") == 1, text[-600:]
    busy = re.findall(rb"busy (\d+)", channel_path(console, name).read_bytes())
    assert [int(n) for n in busy] == list(range(1, following + 1))
    after = listed(stub, name)
    assert after.cpu_time_ns > cpu_before   # counted on from where it was, not from the new QEMU's 0
    assert after.slept_s >= 3 and after.hibernated_bytes == 0
    again = stub.ResumeDomain(agent_pb2.ResumeDomainRequest(name=name), timeout=60)
    assert not again.resumed   # idempotent
    log = agent.log_text()
    for event in ("hibernate.started", "hibernate.saved", "resume.started", "resume.resumed"):
        assert f"event={event}" in log, event
    assert "hibernate.helper_idled" in log   # libvirt's I/O helper was put at volunteer priority


def test_terminating_a_hibernated_vm_removes_its_state_file_and_overlay(agent, stub):
    name = unique_name("hibterm")
    stub.LaunchDomain(launch_request(name, kernel_cmdline=JOBS))
    wait_for_console(agent.state_dir / "console" / f"{name}.log", "GLEANER-JOB 1 start", 120)
    stub.HibernateDomain(agent_pb2.HibernateDomainRequest(name=name), timeout=120)
    state_file = agent.state_dir / "hibernation" / f"{name}.save"
    assert state_file.is_file()
    done = stub.TerminateDomain(agent_pb2.TerminateDomainRequest(name=name), timeout=60)
    assert done.outcome == agent_pb2.TERMINATION_OUTCOME_ALREADY_STOPPED
    assert not state_file.exists() and not (agent.state_dir / "overlays" / f"{name}.qcow2").exists()
    assert listed(stub, name) is None
    assert "event=hibernate.discarded" in agent.log_text()
