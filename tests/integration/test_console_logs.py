"""Console logs on the real libvirtd: an ended domain's log stays for lifecycle.console_keep_seconds
after its last line, then the reaper removes it; a domain that still exists keeps its log however
old, and nothing put in the directory by hand is touched."""
from __future__ import annotations

import os
import time

import pytest

from protos import agent_pb2
from tests.agentproc import AgentProcess, launch_request, unique_name, wait_for, wait_for_console

pytestmark = pytest.mark.libvirt

HOURS = 3600.0


def backdate(paths, seconds: float) -> None:
    for path in paths:
        past = time.time() - seconds
        os.utime(path, (past, past))


def expired_lines(agent: AgentProcess) -> list[str]:
    return [line for line in agent.log_text().splitlines() if "event=console.logs_expired" in line]


def test_an_ended_domains_console_log_is_kept_then_expires(test_env):
    agent = AgentProcess(test_env, name="consoles", settings=dict(console_keep_seconds=HOURS)).start()
    try:
        stub = agent.stub()
        console = agent.state_dir / "console"
        volunteer, foreground, running = unique_name("bflog"), unique_name("fglog"), unique_name("runlog")
        for name, role in ((volunteer, agent_pb2.ROLE_BACKFILL), (foreground, agent_pb2.ROLE_ON_DEMAND),
                           (running, agent_pb2.ROLE_BACKFILL)):
            stub.LaunchDomain(launch_request(name, role=role))
        for name in (volunteer, foreground, running):
            wait_for_console(console / f"{name}.log", "GLEANER-READY", 120)
        for name in (volunteer, foreground):
            stub.TerminateDomain(agent_pb2.TerminateDomainRequest(name=name, force=True))
        assert "GLEANER-READY" in (console / f"{volunteer}.log").read_text(errors="replace")   # kept to read
        assert (console / f"{foreground}.log").exists() and not (console / f"{volunteer}.work").exists()

        secret = agent.state_dir / "secret.log"
        secret.write_text("not the agent's\n")
        (console / "link.log").symlink_to(secret)
        (console / "notes.txt").write_text("an admin's notes\n")
        (console / "crashed.work.1").write_text("busy 1\n")   # a copy a crash left behind
        (console / "fresh.log").write_text("written just now\n")
        by_hand = [console / "link.log", console / "notes.txt"]
        old = [console / f"{volunteer}.log", console / f"{foreground}.log", console / "crashed.work.1",
               console / f"{running}.log", console / f"{running}.work"]
        backdate(old + by_hand, 2 * HOURS)

        agent.stop()
        agent.start()   # its first reaper pass looks for expired logs
        expired = [console / f"{volunteer}.log", console / f"{foreground}.log", console / "crashed.work.1"]
        # the pass removes them one by one: wait for the last, rather than read the others mid-pass
        wait_for(lambda: not any(path.exists() for path in expired) and expired_lines(agent), 20,
                 "the reaper to remove the expired logs")
        assert (console / f"{running}.log").exists() and (console / f"{running}.work").exists()   # its domain runs
        assert (console / "fresh.log").exists()          # kept for its hour
        assert all(path.is_symlink() or path.exists() for path in by_hand) and secret.exists()
        [line] = expired_lines(agent)
        assert "domains=3" in line and "files=3" in line and volunteer in line and foreground in line
        assert "keep_s=3600" in line

        # Kept for no time: a log goes with its domain, and a stray one within a reap pass or two.
        agent.stop()
        agent.settings["console_keep_seconds"] = 0
        agent.start()
        wait_for(lambda: not (console / "fresh.log").exists(), 20, "the reaper to remove the stray log")
        gone = unique_name("nolog")
        stub = agent.stub()
        stub.LaunchDomain(launch_request(gone))
        assert (console / f"{gone}.log").exists()
        stub.TerminateDomain(agent_pb2.TerminateDomainRequest(name=gone, force=True))
        assert not (console / f"{gone}.log").exists() and not (console / f"{gone}.work").exists()
        (console / "stray.log.0").write_text("left by hand in a name of ours\n")
        wait_for(lambda: not (console / "stray.log.0").exists(), 10, "a later reaper pass to remove it")
        assert (console / f"{running}.log").exists() and (console / "notes.txt").exists()
    finally:
        agent.stop()
