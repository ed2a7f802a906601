"""The agent killed part-way through a launch or a terminate, and libvirtd restarted in the
middle of a terminate, with real agent processes and real QEMU guests.

The agent dies at named crash points (nodeagent/crashpoints.py, armed by the environment
variable GLEANER_AGENT_CRASH_AT): os._exit(137), as a SIGKILL would leave it. Afterwards,
once the agent is started again, no domain is left half-made (defined but never started),
no overlay is left without its domain, and every domain is in a state the controller can
resolve: listed running, or gone.
"""
from __future__ import annotations

import threading
import time
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import grpc
import libvirt
import pytest

from nodeagent.crashpoints import ENV as CRASH_ENV
from nodeagent.crashpoints import EXIT_CODE
from nodeagent.host.domainxml import NAMESPACE
from protos import agent_pb2
from tests.agentproc import (LIBVIRT_URI, AgentProcess, launch_request, restart_libvirtd, unique_name, wait_for,
                             wait_for_console)

READY = "GLEANER-READY"
libvirt.registerErrorHandler(lambda _ctx, _err: None, None)  # errors reach us as exceptions


def libvirt_state(name: str) -> tuple[bool, bool] | None:
    """(active, marked started in our metadata) of the domain in libvirt, or None if it is not defined."""
    conn = libvirt.open(LIBVIRT_URI)
    try:
        try:   # the reaper may undefine it between any two of these calls
            dom = conn.lookupByName(name)
            xml = dom.XMLDesc(0)
            active = bool(dom.isActive())
        except libvirt.libvirtError as exc:
            if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
                return None
            raise
        started = ET.fromstring(xml).findtext(f"metadata/{{{NAMESPACE}}}instance/{{{NAMESPACE}}}started")
        return active, started != "no"
    finally:
        conn.close()


def overlay_of(agent: AgentProcess, name: str) -> Path:
    return agent.state_dir / "overlays" / f"{name}.qcow2"


def listed(agent: AgentProcess) -> dict[str, agent_pb2.Domain]:
    return {d.name: d for d in agent.stub().ListDomains(agent_pb2.ListDomainsRequest()).domains}


def start_armed(agent: AgentProcess, point: str) -> AgentProcess:
    """Start the agent with one crash point armed (only this process: a restart disarms it)."""
    return agent.start(env={CRASH_ENV: point})


def expect_crash(agent: AgentProcess, point: str, call) -> None:
    """`call` makes the agent reach `point` and die there; the call fails."""
    with pytest.raises(grpc.RpcError):
        call()
    process = agent.process
    wait_for(lambda: process.poll() is not None, 30, f"the agent to die at {point}")
    assert process.returncode == EXIT_CODE, agent.log_text()[-3000:]
    assert f"point={point}" in agent.log_text()
    agent.process = None


def assert_resolved(agent: AgentProcess, name: str) -> None:
    """The domain is gone with its overlay, or running and listed as running with its overlay;
    and no overlay of the agent's is without its domain."""
    state = libvirt_state(name)
    domains = listed(agent)
    if state is None:
        assert name not in domains
        assert not overlay_of(agent, name).exists()
    else:
        assert state == (True, True), state
        assert domains[name].state == agent_pb2.DOMAIN_STATE_RUNNING
        assert overlay_of(agent, name).exists()
    for overlay in (agent.state_dir / "overlays").glob("*.qcow2"):
        assert libvirt_state(overlay.stem) is not None, f"orphan overlay {overlay}"


@pytest.fixture
def crash_agent(test_env):
    """An agent of its own (not yet started): each test kills it at least once."""
    agent = AgentProcess(test_env, name=f"crash-{uuid.uuid4().hex[:6]}")
    yield agent
    agent.stop()


def test_killed_after_the_overlay_the_restarted_agent_removes_it(crash_agent):
    agent, name = crash_agent, unique_name("crash-overlay")
    start_armed(agent, "launch.after_overlay")
    expect_crash(agent, "launch.after_overlay", lambda: agent.stub().LaunchDomain(launch_request(name)))
    assert libvirt_state(name) is None and overlay_of(agent, name).exists()
    agent.start()
    wait_for(lambda: not overlay_of(agent, name).exists(), 15, "the reaper to remove the orphan overlay")
    wait_for(lambda: "event=overlay.orphan_removed" in agent.log_text(), 5, "its log line")  # logged just after
    assert_resolved(agent, name)
    reply = agent.stub().LaunchDomain(launch_request(name))  # the controller's retry starts afresh
    assert reply.created and reply.domain.state == agent_pb2.DOMAIN_STATE_RUNNING
    assert_resolved(agent, name)


def test_killed_after_define_the_restarted_agent_removes_the_unstarted_domain(crash_agent):
    agent, name = crash_agent, unique_name("crash-define")
    agent.settings["unfinished_launch_seconds"] = 0  # no wait for a repeated launch
    start_armed(agent, "launch.after_define")
    expect_crash(agent, "launch.after_define",
                 lambda: agent.stub().LaunchDomain(launch_request(name, agent_pb2.ROLE_ON_DEMAND)))
    assert libvirt_state(name) == (False, False)  # defined, never started: half-made
    assert overlay_of(agent, name).exists()
    agent.start()
    # Even a foreground domain: its launch never returned, so no one owns it yet.
    wait_for(lambda: libvirt_state(name) is None, 15, "the reaper to remove the unstarted domain")
    wait_for(lambda: not overlay_of(agent, name).exists(), 15, "its overlay to go")
    wait_for(lambda: "event=domain.unstarted_removed" in agent.log_text(), 5, "its log line")  # logged just after
    assert_resolved(agent, name)


def test_killed_after_define_a_repeated_launch_finishes_it(crash_agent):
    agent, name = crash_agent, unique_name("crash-retry")
    agent.settings["unfinished_launch_seconds"] = 600  # the reaper leaves it for the retry
    start_armed(agent, "launch.after_define")
    expect_crash(agent, "launch.after_define", lambda: agent.stub().LaunchDomain(launch_request(name)))
    assert libvirt_state(name) == (False, False)
    agent.start()
    time.sleep(1.5)  # a reaper pass or two: a young unfinished launch is left for its retry
    assert libvirt_state(name) == (False, False)
    # The controller retries the launch it never heard back from: this call finishes it.
    with pytest.raises(grpc.RpcError) as err:  # a different spec is still refused
        agent.stub().LaunchDomain(launch_request(name, vcpus=2))
    assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
    reply = agent.stub().LaunchDomain(launch_request(name))
    assert reply.created and reply.domain.state == agent_pb2.DOMAIN_STATE_RUNNING
    assert "event=domain.launch_resumed" in agent.log_text()
    wait_for_console(reply.domain.console_log, READY)
    assert libvirt_state(name) == (True, True)
    again = agent.stub().LaunchDomain(launch_request(name))  # now it is an ordinary running domain
    assert not again.created and again.domain.uuid == reply.domain.uuid
    assert_resolved(agent, name)


def test_an_unfinished_launch_no_one_repeats_is_removed_after_its_time(crash_agent):
    agent, name = crash_agent, unique_name("crash-late")
    agent.settings["unfinished_launch_seconds"] = 8
    start_armed(agent, "launch.after_define")
    expect_crash(agent, "launch.after_define", lambda: agent.stub().LaunchDomain(launch_request(name)))
    agent.start()
    assert libvirt_state(name) == (False, False)  # young: left for a retry
    wait_for(lambda: libvirt_state(name) is None, 20, "the reaper to remove it once its time is up")
    wait_for(lambda: not overlay_of(agent, name).exists(), 15, "its overlay to go")
    assert_resolved(agent, name)


def test_killed_after_start_the_restarted_agent_keeps_it_running(crash_agent):
    agent, name = crash_agent, unique_name("crash-start")
    start_armed(agent, "launch.after_start")
    expect_crash(agent, "launch.after_start", lambda: agent.stub().LaunchDomain(launch_request(name)))
    assert libvirt_state(name) == (True, False)  # running, its metadata not yet saying so
    agent.start()
    wait_for(lambda: libvirt_state(name) == (True, True), 15, "the agent to mark it started")
    wait_for(lambda: "event=domain.marked_started" in agent.log_text(), 5, "its log line")  # logged just after
    assert_resolved(agent, name)


def test_killed_after_the_power_button_a_repeated_terminate_finishes(crash_agent):
    agent, name = crash_agent, unique_name("crash-acpi")
    start_armed(agent, "terminate.after_acpi")
    reply = agent.stub().LaunchDomain(launch_request(name, agent_pb2.ROLE_ON_DEMAND))
    wait_for_console(reply.domain.console_log, READY)
    expect_crash(agent, "terminate.after_acpi",
                 lambda: agent.stub().TerminateDomain(agent_pb2.TerminateDomainRequest(name=name)))
    wait_for(lambda: libvirt_state(name) == (False, True), 30, "the guest to power off")
    assert overlay_of(agent, name).exists()
    agent.start()
    # A stopped foreground domain is its owner's until terminated: the controller terminates again.
    assert listed(agent)[name].state == agent_pb2.DOMAIN_STATE_SHUTOFF
    result = agent.stub().TerminateDomain(agent_pb2.TerminateDomainRequest(name=name))
    assert result.outcome == agent_pb2.TERMINATION_OUTCOME_ALREADY_STOPPED
    assert libvirt_state(name) is None and not overlay_of(agent, name).exists()
    with pytest.raises(grpc.RpcError) as err:  # and once more: it is gone
        agent.stub().TerminateDomain(agent_pb2.TerminateDomainRequest(name=name))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert_resolved(agent, name)


def test_killed_after_the_power_button_a_stopped_volunteer_is_reaped(crash_agent):
    agent, name = crash_agent, unique_name("crash-acpi-vol")
    start_armed(agent, "terminate.after_acpi")
    reply = agent.stub().LaunchDomain(launch_request(name, agent_pb2.ROLE_BACKFILL))
    wait_for_console(reply.domain.console_log, READY)
    expect_crash(agent, "terminate.after_acpi",
                 lambda: agent.stub().TerminateDomain(agent_pb2.TerminateDomainRequest(name=name)))
    wait_for(lambda: libvirt_state(name) == (False, True), 30, "the guest to power off")
    agent.start()
    wait_for(lambda: libvirt_state(name) is None, 15, "the reaper to remove the stopped volunteer")
    wait_for(lambda: not overlay_of(agent, name).exists(), 15, "its overlay to go")
    assert_resolved(agent, name)


def test_killed_after_undefine_the_overlay_is_reaped(crash_agent):
    agent, name = crash_agent, unique_name("crash-undef")
    start_armed(agent, "terminate.after_undefine")
    agent.stub().LaunchDomain(launch_request(name))
    expect_crash(agent, "terminate.after_undefine",
                 lambda: agent.stub().TerminateDomain(agent_pb2.TerminateDomainRequest(name=name, force=True)))
    assert libvirt_state(name) is None and overlay_of(agent, name).exists()
    agent.start()
    wait_for(lambda: not overlay_of(agent, name).exists(), 15, "the reaper to remove the orphan overlay")
    with pytest.raises(grpc.RpcError) as err:
        agent.stub().TerminateDomain(agent_pb2.TerminateDomainRequest(name=name))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert_resolved(agent, name)


def test_libvirtd_restarted_mid_terminate_the_terminate_completes(crash_agent):
    agent, name = crash_agent, unique_name("crash-libvirtd")
    agent.start()
    # The guest ignores the power button, so the terminate waits out its grace period, and
    # libvirtd goes away and comes back in the middle of it.
    reply = agent.stub().LaunchDomain(launch_request(name, kernel_cmdline="gleaner.acpi=ignore"))
    wait_for_console(reply.domain.console_log, "GLEANER-ACPI ignoring the power button")
    wait_for_console(reply.domain.console_log, READY)
    outcome: dict = {}

    def terminate() -> None:
        try:
            outcome["result"] = agent.stub().TerminateDomain(
                agent_pb2.TerminateDomainRequest(name=name, grace_seconds=8), timeout=60)
        except grpc.RpcError as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=terminate)
    thread.start()
    wait_for(lambda: "event=domain.power_button_pressed" in agent.log_text(), 15, "the power button")
    restart_libvirtd()
    thread.join(60)
    assert "error" not in outcome, outcome["error"].details()
    result = outcome["result"]
    assert result.outcome == agent_pb2.TERMINATION_OUTCOME_DESTROYED_AFTER_GRACE, result.detail
    assert libvirt_state(name) is None and not overlay_of(agent, name).exists()
    assert_resolved(agent, name)


def test_killed_mid_terminate_and_libvirtd_restarted_a_repeated_terminate_finishes(crash_agent):
    agent, name = crash_agent, unique_name("crash-both")
    start_armed(agent, "terminate.after_acpi")
    reply = agent.stub().LaunchDomain(launch_request(name, agent_pb2.ROLE_ON_DEMAND,
                                                     kernel_cmdline="gleaner.acpi=ignore"))
    wait_for_console(reply.domain.console_log, READY)
    expect_crash(agent, "terminate.after_acpi",
                 lambda: agent.stub().TerminateDomain(agent_pb2.TerminateDomainRequest(name=name)))
    restart_libvirtd()
    agent.start()
    assert listed(agent)[name].state == agent_pb2.DOMAIN_STATE_RUNNING  # it ignored the button
    result = agent.stub().TerminateDomain(agent_pb2.TerminateDomainRequest(name=name, grace_seconds=2))
    assert result.outcome == agent_pb2.TERMINATION_OUTCOME_DESTROYED_AFTER_GRACE, result.detail
    assert libvirt_state(name) is None and not overlay_of(agent, name).exists()
    assert_resolved(agent, name)
