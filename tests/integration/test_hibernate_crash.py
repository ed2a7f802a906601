"""Hibernation survives the agent's death (nodeagent/hibernation.py, reconcile).

The agent process is really killed (os._exit at a crash point, as SIGKILL leaves it) in the
middle of a save and in the middle of a restore; libvirtd finishes its job without it. The
restarted agent must leave no half state: no orphan or half-written state file, no domain that
says it is hibernated when its state is not saved, and a restored domain resumed at volunteer
priority. Debris left while the agent was down (a state file with no domain, a half-written one
beside a stopped domain) is removed at start-up.
"""
from __future__ import annotations

import re

import grpc
import libvirt
import pytest

from protos import agent_pb2
from tests.agentproc import (LIBVIRT_URI, AgentProcess, console_text, domain_cgroup_dir, launch_request,
                             read_cgroup_int, remove_test_domains, unique_name, wait_for, wait_for_console)

pytestmark = pytest.mark.libvirt
JOBS = "gleaner.workload=jobs gleaner.jobs=3,1"
CRASHES = {"GLEANER_AGENT_CRASH_AT": "hibernate.after_save_started,resume.after_restore"}


def listed(stub, name: str) -> agent_pb2.Domain | None:
    return next((d for d in stub.ListDomains(agent_pb2.ListDomainsRequest()).domains if d.name == name), None)


def libvirt_state(name: str) -> tuple[bool, int] | None:
    conn = libvirt.open(LIBVIRT_URI)
    try:
        dom = conn.lookupByName(name)
        return bool(dom.isActive()), dom.state()[0]
    except libvirt.libvirtError:
        return None
    finally:
        conn.close()


def dies(agent: AgentProcess, call) -> None:
    """`call` kills the agent at its crash point: the caller sees the connection go, the process exits 137."""
    with pytest.raises(grpc.RpcError) as caught:
        call()
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE, caught.value
    agent.process.wait(30)
    assert agent.process.returncode == 137
    agent.process = None


def jobs_started(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"GLEANER-JOB (\d+) start", text)]


@pytest.fixture
def crashing_agent(test_env):
    proc = AgentProcess(test_env, name="hib-crash")
    yield proc
    proc.stop()
    remove_test_domains()


def test_an_agent_killed_mid_save_and_mid_restore_leaves_no_half_state(crashing_agent):
    agent = crashing_agent.start(env=CRASHES)
    name = unique_name("hibcrash")
    agent.stub().LaunchDomain(launch_request(name, kernel_cmdline=JOBS))
    console = agent.state_dir / "console" / f"{name}.log"
    wait_for_console(console, "GLEANER-JOB 2 start", 120)
    state_file = agent.state_dir / "hibernation" / f"{name}.save"

    # Killed while libvirtd saves: libvirtd finishes alone; the restarted agent finds it hibernated.
    dies(agent, lambda: agent.stub().HibernateDomain(agent_pb2.HibernateDomainRequest(name=name), timeout=120))
    assert "point=hibernate.after_save_started" in agent.log_text()
    agent.start(env=CRASHES)
    stub = agent.stub()
    domain = wait_for(lambda: (d := listed(stub, name)) and d.state == agent_pb2.DOMAIN_STATE_HIBERNATED and d,
                      60, "the domain listed as hibernated", interval=0.3)
    assert state_file.open("rb").read(16) == b"LibvirtQemudSave"   # said hibernated only once saved whole
    assert domain.hibernated_bytes == state_file.stat().st_blocks * 512
    assert libvirt_state(name)[0] is False
    jobs_at_save = jobs_started(console_text(console))

    # Killed right after libvirtd restored it, paused, before its class went on: the restarted
    # agent puts the class on, lets it run, and deletes the state file.
    dies(agent, lambda: stub.ResumeDomain(agent_pb2.ResumeDomainRequest(name=name), timeout=120))
    assert libvirt_state(name) == (True, libvirt.VIR_DOMAIN_PAUSED) and state_file.exists()
    agent.start(env=CRASHES)
    wait_for(lambda: not state_file.exists(), 30, "the restarted agent to finish the resume", interval=0.2)
    assert libvirt_state(name) == (True, libvirt.VIR_DOMAIN_RUNNING)
    assert read_cgroup_int(domain_cgroup_dir(name), "cpu.idle") == 1
    assert listed(agent.stub(), name).state == agent_pb2.DOMAIN_STATE_RUNNING
    # logged right after the file's deletion, which the wait above watched: wait for the line too
    wait_for(lambda: "event=resume.finished" in agent.log_text(), 10, "the agent to log resume.finished",
             interval=0.1)
    following = max(jobs_at_save) + 1
    wait_for_console(console, f"GLEANER-JOB {following} start", 60)
    assert jobs_started(console_text(console)) == list(range(1, following + 1))   # no job started again
    assert list((agent.state_dir / "hibernation").iterdir()) == []


def test_the_agent_killed_at_every_hibernation_crash_point_converges(crashing_agent):
    """One guest through five deaths, one at each crash point: after each restart the domain is
    either hibernated with a complete state file or running at volunteer priority without one,
    never in between, and its jobs go on without one started again."""
    agent = crashing_agent.start()
    name = unique_name("hibpoints")
    agent.stub().LaunchDomain(launch_request(name, kernel_cmdline=JOBS))
    console = agent.state_dir / "console" / f"{name}.log"
    wait_for_console(console, "GLEANER-JOB 1 start", 120)
    state_file = agent.state_dir / "hibernation" / f"{name}.save"
    steps = [("hibernate", "hibernate.after_save_started"), ("resume", "resume.restore_started"),
             ("hibernate", "hibernate.after_save"), ("resume", "resume.before_run"),
             ("hibernate", ""), ("resume", "resume.after_restore")]
    for call, point in steps:
        agent.stop()
        agent.start(env={"GLEANER_AGENT_CRASH_AT": point} if point else None)
        stub = agent.stub()
        request = (lambda: stub.HibernateDomain(agent_pb2.HibernateDomainRequest(name=name), timeout=120)) \
            if call == "hibernate" else \
            (lambda: stub.ResumeDomain(agent_pb2.ResumeDomainRequest(name=name), timeout=120))
        if point:
            dies(agent, request)
            agent.start()
        else:
            request()
        stub = agent.stub()
        if call == "hibernate":
            wait_for(lambda: (d := listed(stub, name)) and d.state == agent_pb2.DOMAIN_STATE_HIBERNATED, 60,
                     f"hibernated after a death at {point}", interval=0.3)
            assert state_file.open("rb").read(16) == b"LibvirtQemudSave" and libvirt_state(name)[0] is False
        else:
            wait_for(lambda: not state_file.exists() and libvirt_state(name) == (True, libvirt.VIR_DOMAIN_RUNNING),
                     60, f"running again after a death at {point}", interval=0.3)
            assert read_cgroup_int(domain_cgroup_dir(name), "cpu.idle") == 1
            assert listed(stub, name).state == agent_pb2.DOMAIN_STATE_RUNNING
    jobs = jobs_started(console_text(console))
    wait_for_console(console, f"GLEANER-JOB {max(jobs) + 1} start", 60)
    assert jobs_started(console_text(console)) == list(range(1, max(jobs) + 2))
    assert console_text(console).count("GLEANER-READY") == 1
    assert list((agent.state_dir / "hibernation").iterdir()) == []


def test_state_files_left_while_the_agent_was_down_are_settled_at_start(crashing_agent):
    """A state file with no domain, and a half-written one beside a stopped backfill domain (a
    save that never finished): both deleted at start-up, and the stopped domain then reaped as
    any stopped backfill domain; a hibernated domain beside them is left alone."""
    agent = crashing_agent.start()
    stub = agent.stub()
    stopped, sleeper = unique_name("half"), unique_name("sleeper")
    for name in (stopped, sleeper):
        stub.LaunchDomain(launch_request(name, kernel_cmdline=JOBS))
    wait_for_console(agent.state_dir / "console" / f"{sleeper}.log", "GLEANER-JOB 1 start", 120)
    stub.HibernateDomain(agent_pb2.HibernateDomainRequest(name=sleeper), timeout=120)
    agent.stop()
    conn = libvirt.open(LIBVIRT_URI)
    try:
        conn.lookupByName(stopped).destroy()   # stopped while the agent was away
    finally:
        conn.close()
    directory = agent.state_dir / "hibernation"
    half, orphan = directory / f"{stopped}.save", directory / f"{unique_name('gone')}.save"
    half.write_bytes(b"LibvirtQemudPart" + b"\0" * 4096)
    orphan.write_bytes((directory / f"{sleeper}.save").read_bytes()[:65536])   # a whole header, no domain
    agent.start()
    wait_for(lambda: not half.exists() and not orphan.exists(), 20, "the leftover state files removed")
    wait_for(lambda: libvirt_state(stopped) is None, 20, "the stopped backfill domain reaped")
    assert listed(agent.stub(), sleeper).state == agent_pb2.DOMAIN_STATE_HIBERNATED
    assert (directory / f"{sleeper}.save").exists()
    log = agent.log_text()
    assert log.count("event=hibernate.state_file_removed") == 2
