"""Console logs within a byte budget, on the real libvirtd (issue 23): over
lifecycle.console_budget_mib the reaper removes ended domains' logs, the oldest first, logging
each file and its size, and never a running domain's, however old. And the set-up makes sure
QEMU hands console output to virtlogd (stdio_handler = "logd"), which bounds each log."""
from __future__ import annotations

import os
import subprocess
import time

import pytest

from protos import agent_pb2
from tests.agentproc import REPO, AgentProcess, launch_request, unique_name, wait_for, wait_for_console

pytestmark = pytest.mark.libvirt

MIB = 2**20


def backdate(path, seconds: float) -> None:
    past = time.time() - seconds
    os.utime(path, (past, past))


def removal_lines(agent: AgentProcess) -> list[str]:
    return [line for line in agent.log_text().splitlines() if "event=console.log_removed_over_budget" in line]


def test_over_budget_the_oldest_ended_logs_go_and_a_running_domains_stays(test_env):
    agent = AgentProcess(test_env, name="budget", settings=dict(console_budget_mib=16,
                                                                console_keep_seconds=86400.0)).start()
    try:
        stub = agent.stub()
        console = agent.state_dir / "console"
        running = unique_name("budrun")
        stub.LaunchDomain(launch_request(running), timeout=120)
        wait_for_console(console / f"{running}.log", "GLEANER-READY", 120)
        ended = [console / f"{unique_name('budend')}.log" for _ in range(3)]   # logs of domains now gone
        chatter = b"chatty guest\n" * (7 * MIB // 13)   # 7 MiB each: 21 MiB with the running log
        for age, path in zip((3000, 2000, 1000), ended):
            path.write_bytes(chatter)
            backdate(path, age)
        backdate(console / f"{running}.log", 9000)   # the oldest of all: still kept, its domain runs

        agent.stop()
        agent.start()   # its first reaper pass sweeps the console directory
        wait_for(lambda: not ended[0].exists() and removal_lines(agent), 20, "the oldest ended log to go")
        time.sleep(1)   # a second pass would find the directory within budget: nothing more goes
        assert ended[1].exists() and ended[2].exists()
        assert (console / f"{running}.log").exists()
        [line] = removal_lines(agent)
        assert f"path={ended[0]}" in line and f"bytes={len(chatter)}" in line
        assert "event=console.budget_exceeded" not in agent.log_text()
        stub.TerminateDomain(agent_pb2.TerminateDomainRequest(name=running, force=True), timeout=60)
    finally:
        agent.stop()


def test_the_set_up_puts_the_logd_handler_back_and_restarts_libvirtd(test_env):
    conf = test_env.root / "qemu.conf"
    conf.write_text('# stdio_handler = "file"\nuser = "libvirt-qemu"\nstdio_handler = "file"\n')
    done = subprocess.run(["bash", str(REPO / "scripts/libvirt-services.sh")], capture_output=True, text=True,
                          env={**os.environ, "QEMU_CONF": str(conf)}, timeout=60)
    assert done.returncode == 0, done.stderr
    assert conf.read_text() == '# stdio_handler = "file"\nuser = "libvirt-qemu"\nstdio_handler = "logd"\n'
    assert f'{conf} had stdio_handler = "file"; set it to "logd"' in done.stderr
    assert "restarting libvirtd" in done.stderr
    again = subprocess.run(["bash", str(REPO / "scripts/libvirt-services.sh")], capture_output=True, text=True,
                           env={**os.environ, "QEMU_CONF": str(conf)}, timeout=60)
    assert again.returncode == 0 and again.stderr == ""   # already right: nothing changed, nothing restarted
    assert subprocess.run(["virsh", "-c", "qemu:///system", "version"], capture_output=True).returncode == 0
