"""systemd readiness and watchdog (gleaner_common/watchdog.py), from the real daemons.

The real controller and the real agent are started with NOTIFY_SOCKET naming a unix datagram
socket this test owns and WATCHDOG_USEC set, as systemd does for a Type=notify unit with
WatchdogSec=. Each says READY=1 once serving, then WATCHDOG=1 every half of WATCHDOG_USEC;
when one of the loops that matter hangs (GLEANER_WATCHDOG_HANG freezes it at its Nth beat, in
its own thread), the pings stop, which is what makes systemd restart the daemon.
"""
from __future__ import annotations

import socket
import time
import uuid
from pathlib import Path

import pytest

from tests.agentproc import AgentProcess, LabEnv
from tests.controllerproc import ControllerProcess
from protos import controller_pb2, controller_pb2_grpc

WATCHDOG_USEC = 300_000   # a ping every 0.15 s
ALLOWED_S = 2.0           # a loop silent this long is hung (GLEANER_WATCHDOG_ALLOWED_S)


class NotifySocket:
    """The socket systemd would listen on: every datagram, with when it came."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / f"notify-{uuid.uuid4().hex[:6]}.sock"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(self.path))
        self.sock.settimeout(0.1)
        self.messages: list[tuple[float, str]] = []

    def env(self, **more: str) -> dict[str, str]:
        return {"NOTIFY_SOCKET": str(self.path), "WATCHDOG_USEC": str(WATCHDOG_USEC),
                "GLEANER_WATCHDOG_ALLOWED_S": str(ALLOWED_S), **more}

    def collect(self, seconds: float) -> list[tuple[float, str]]:
        """What arrives within SECONDS (also kept in self.messages)."""
        got, deadline = [], time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                continue
            got.append((time.monotonic(), data.decode()))
        self.messages += got
        return got

    def close(self) -> None:
        self.sock.close()
        self.path.unlink(missing_ok=True)


def pings(messages: list[tuple[float, str]]) -> list[float]:
    return [at for at, text in messages if text == "WATCHDOG=1"]


def assert_ready_then_pings(notify: NotifySocket) -> None:
    first = notify.collect(3.0)
    texts = [text for _, text in notify.messages]
    assert "READY=1" in texts, texts
    assert texts.index("READY=1") == 0, texts   # ready first: pings only from a serving daemon
    times = pings(first)
    assert len(times) >= 8, texts           # 3 s at one ping every 0.15 s
    assert max(b - a for a, b in zip(times, times[1:])) < 1.0


def assert_pings_stop(notify: NotifySocket, process, loop: str) -> None:
    """Once LOOP hangs, the pings stop within its allowed interval (plus its own pace, at most
    1 s here), and stay stopped, while the process lives on: only systemd would end it."""
    deadline = time.monotonic() + 20
    while "event=watchdog.hanging" not in process.log_text():
        assert time.monotonic() < deadline, f"{loop} never reached its hang"
        notify.collect(0.2)
    assert f"loop={loop}" in process.log_text()
    notify.collect(ALLOWED_S + 1.5)
    quiet = notify.collect(4.0)
    assert pings(quiet) == [], f"WATCHDOG=1 still sent with {loop} hung"
    assert process.process.poll() is None
    log = process.log_text()
    assert "event=watchdog.withheld" in log and f"hung={loop}" in log


@pytest.fixture
def env():
    lab = LabEnv.create()
    yield lab
    lab.remove()


@pytest.fixture
def notify(env):
    sock = NotifySocket(env.root)
    yield sock
    sock.close()


def test_the_controller_says_ready_then_pings_while_its_loops_beat(env, notify):
    controller = ControllerProcess(env).start(notify.env())
    try:
        assert_ready_then_pings(notify)
        assert "event=watchdog.started" in controller.log_text()
    finally:
        controller.stop()


def test_a_hung_scheduler_stops_the_controllers_pings(env, notify):
    # the liveness job runs every 0.5 s (tests/controllerproc.py): frozen at its 8th run
    controller = ControllerProcess(env).start(notify.env(GLEANER_WATCHDOG_HANG="scheduler:8"))
    try:
        notify.collect(1.0)
        assert pings(notify.messages), "no WATCHDOG=1 before the hang"
        assert_pings_stop(notify, controller, "scheduler")
    finally:
        controller.stop()


def test_a_report_stuck_in_intake_stops_the_controllers_pings(env, notify):
    """A node's report stream, its second report frozen in the controller's hands."""
    controller = ControllerProcess(env).start(notify.env(GLEANER_WATCHDOG_HANG="intake:2"))
    try:
        notify.collect(1.0)
        report = dict(agent_address="127.0.0.1:1", cpus=4, memory_mib=8192, images=["tiny"], min_memory_mib=32)
        with controller.channel(env.pki.agent("wd-node")) as channel:
            stub = controller_pb2_grpc.ControllerStub(channel)
            call = stub.Report.future(iter([controller_pb2.NodeReport(node_id="wd-node", seq=seq, **report)
                                            for seq in (1, 2)]), timeout=30)
            assert_pings_stop(notify, controller, "intake")
            call.cancel()
    finally:
        controller.stop()


def test_an_idle_intake_is_not_hung(env, notify):
    """No node reporting at all for longer than the allowed interval: the pings go on."""
    controller = ControllerProcess(env).start(notify.env())
    try:
        report = controller_pb2.NodeReport(node_id="wd-idle", agent_address="127.0.0.1:1", cpus=4, memory_mib=8192,
                                           images=["tiny"], min_memory_mib=32)
        with controller.channel(env.pki.agent("wd-idle")) as channel:
            assert controller_pb2_grpc.ControllerStub(channel).Report(iter([report]), timeout=10).reports == 1
        notify.collect(ALLOWED_S + 1.0)
        assert len(pings(notify.collect(3.0))) >= 8
    finally:
        controller.stop()


def test_without_notify_socket_the_daemon_runs_as_before(env):
    controller = ControllerProcess(env).start({"WATCHDOG_USEC": str(WATCHDOG_USEC)})
    try:
        time.sleep(1.0)
        assert controller.process.poll() is None
        assert "watchdog.notify_failed" not in controller.log_text()
    finally:
        controller.stop()


def agent_with(test_env, notify: NotifySocket, name: str, **env: str) -> AgentProcess:
    # the reporter reports to a controller that is not there: it waits for it, beating meanwhile
    settings = dict(controller_address="127.0.0.1:9", controller_report_seconds=0.5)
    return AgentProcess(test_env, name=name, settings=settings).start(notify.env(**env))


@pytest.mark.libvirt
def test_the_agent_says_ready_then_pings_while_its_loops_beat(test_env, notify):
    agent = agent_with(test_env, notify, f"wd-{uuid.uuid4().hex[:4]}")
    try:
        assert_ready_then_pings(notify)
        notify.collect(ALLOWED_S)   # the reporter waiting for its controller is not hung
        assert len(pings(notify.collect(2.0))) >= 5
    finally:
        agent.stop()


@pytest.mark.libvirt
@pytest.mark.parametrize("loop", ["guard", "reporter"])
def test_a_hung_agent_loop_stops_its_pings(test_env, notify, loop):
    agent = agent_with(test_env, notify, f"wd-{uuid.uuid4().hex[:4]}", GLEANER_WATCHDOG_HANG=f"{loop}:3")
    try:
        assert_pings_stop(notify, agent, loop)
        assert "READY=1" in [text for _, text in notify.messages]
    finally:
        agent.stop()
