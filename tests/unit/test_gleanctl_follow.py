"""`gleanctl events --follow` and `--kind` (issue 27, item 4), against a real controller process
with mutual TLS: new events are printed as they are written until Ctrl-C, over a server stream
(FollowEvents) with bounds like the other calls; an unknown kind is an error naming the known
ones, not "no events"."""
from __future__ import annotations

import json
import queue
import re
import signal
import subprocess
import sys
import threading
import time

import grpc
import pytest

from controller.gleanctl import EVENT_KINDS
from controller.server import FOLLOW_BATCH
from protos import controller_pb2
from tests.agentproc import REPO, LabEnv
from tests.controllerproc import ControllerProcess, rpc_code


@pytest.fixture(scope="module")
def controller(tmp_path_factory):
    env = LabEnv.in_dir(tmp_path_factory.mktemp("gleanctl-follow"), nodes=("f1",))
    proc = ControllerProcess(env, name="follow-ctl").start()
    yield proc
    proc.stop()


class Follower:
    """`gleanctl events --follow ...` running, its output lines read as they come."""

    def __init__(self, controller: ControllerProcess, *args: str) -> None:
        # Ctrl-C's default action in gleanctl, whatever the test run's own: a run started in the
        # background (`pytest ... &` in a script) ignores SIGINT, and its children inherit that
        self.process = subprocess.Popen([sys.executable, "-m", "controller.gleanctl", *controller.gleanctl_args(),
                                         "events", "--follow", *args], cwd=REPO, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True,
                                        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [self.lines.put(l.rstrip("\n")) for l in self.process.stdout],
                         daemon=True).start()

    def until(self, predicate, timeout: float = 15.0) -> list[str]:
        """The lines read until one satisfies `predicate` (AssertionError if none does in time)."""
        seen, deadline = [], time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                continue
            seen.append(line)
            if predicate(line):
                return seen
        raise AssertionError(f"not printed within {timeout}s; printed: {seen}")

    def interrupt(self) -> tuple[int, str]:
        self.process.send_signal(signal.SIGINT)   # Ctrl-C
        code = self.process.wait(10)
        return code, self.process.stderr.read()


def set_backfill(controller: ControllerProcess, **fields) -> None:
    controller.stub().SetBackfill(controller_pb2.SetBackfillRequest(**fields), timeout=10)


def test_follow_prints_new_events_as_they_are_written_until_ctrl_c(controller):
    set_backfill(controller, max_instances=1)
    follower = Follower(controller)
    try:
        seen = follower.until(lambda l: "backfill.configured" in l)   # the newest, already written
        assert seen[0].split() == ["SEQ", "TIME", "KIND", "NODE", "LEASE", "DETAIL"]
        started = time.monotonic()
        set_backfill(controller, max_instances=7)
        line = follower.until(lambda l: "max_instances=7" in l)[-1]
        assert time.monotonic() - started < 3, "printed as it was written, not at the end"
        assert line.split()[2] == "backfill.configured"
        controller.stub().SetReserve(controller_pb2.Reserve(node_id="f1", vcpus=1), timeout=10)
        assert "reserve.set" in follower.until(lambda l: "reserve.set" in l)[-1]
    finally:
        code, stderr = follower.interrupt()
    assert code == 130 and "Traceback" not in stderr, stderr


def test_follow_keeps_to_its_kind_and_prints_json_lines(controller):
    follower = Follower(controller, "--kind", "reserve.set", "-o", "json", "--limit", "1")
    try:
        time.sleep(1.0)   # following
        set_backfill(controller, max_instances=9)
        controller.stub().SetReserve(controller_pb2.Reserve(node_id="f1", vcpus=2), timeout=10)
        seen = follower.until(lambda l: '"vcpus": 2' in l)
        events = [json.loads(l) for l in seen]
        assert {e["kind"] for e in events} == {"reserve.set"}
        assert events[-1]["detail"]["vcpus"] == 2 and events[-1]["node_id"] == "f1"
    finally:
        code, stderr = follower.interrupt()
    assert code == 130 and "Traceback" not in stderr, stderr


def test_an_unknown_kind_is_an_error_naming_the_known_ones(controller):
    for args in (["events", "--kind", "nonsense"], ["events", "--follow", "--kind", "nonsense"]):
        done = subprocess.run([sys.executable, "-m", "controller.gleanctl", *controller.gleanctl_args(), *args],
                              cwd=REPO, capture_output=True, text=True, timeout=30)
        assert done.returncode == 2, done.stderr
        assert "--kind 'nonsense' is not an event kind" in done.stderr and "no events" not in done.stdout
        assert all(kind in done.stderr for kind in EVENT_KINDS)
    done = subprocess.run([sys.executable, "-m", "controller.gleanctl", *controller.gleanctl_args(), "events",
                           "--kind", "vm.preemted"], cwd=REPO, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "did you mean vm.preempted" in done.stderr
    done = subprocess.run([sys.executable, "-m", "controller.gleanctl", *controller.gleanctl_args(), "events",
                           "--kind", "vm.gone"], cwd=REPO, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and done.stdout.strip() == "no events"   # a known kind with none yet


def test_the_stream_is_bounded_in_time_and_batch_and_a_viewer_may_follow(controller):
    viewer = controller.stub(controller.env.pki.viewer)
    start = time.monotonic()
    list(viewer.FollowEvents(controller_pb2.FollowEventsRequest(after_seq=2**62, max_seconds=1), timeout=30))
    assert 0.9 < time.monotonic() - start < 5   # ended by max_seconds, cleanly
    with pytest.raises(grpc.RpcError) as err:   # the caller's deadline ends it too
        list(viewer.FollowEvents(controller_pb2.FollowEventsRequest(after_seq=2**62), timeout=1))
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    agent = controller.stub(controller.env.pki.agent("f1"))
    assert rpc_code(lambda: list(agent.FollowEvents(controller_pb2.FollowEventsRequest(max_seconds=1),
                                                    timeout=5))) == grpc.StatusCode.PERMISSION_DENIED
    assert rpc_code(lambda: list(viewer.FollowEvents(controller_pb2.FollowEventsRequest(kind="x y", max_seconds=1),
                                                     timeout=5))) == grpc.StatusCode.INVALID_ARGUMENT
    # many events at once: in batches of at most FOLLOW_BATCH, in order, none missed
    first = controller.events()[-1].seq
    for n in range(FOLLOW_BATCH + 30):
        set_backfill(controller, max_instances=100 + n)
    batches = list(viewer.FollowEvents(controller_pb2.FollowEventsRequest(after_seq=first, kind="backfill.configured",
                                                                         max_seconds=2), timeout=30))
    sizes = [len(b.events) for b in batches]
    assert max(sizes) == FOLLOW_BATCH and sum(sizes) == FOLLOW_BATCH + 30, sizes
    seqs = [e.seq for b in batches for e in b.events]
    assert seqs == sorted(seqs) and batches[-1].last_seq == seqs[-1]


def test_the_kinds_gleanctl_knows_are_the_documented_ones_and_those_the_controller_writes():
    docs = (REPO / "docs" / "controller.md").read_text()
    section = docs[docs.index("| kind | when |"):]
    section = section[:re.search(r"\n(?!\|)", section).start()]
    documented = [k for line in section.splitlines()[2:]
                  for k in re.findall(r"`([a-z_]+\.[a-z_]+)`", line.split("|")[1])]
    assert sorted(documented) == sorted(EVENT_KINDS)
    written = set()
    for path in (REPO / "controller").rglob("*.py"):
        if "sim" in path.parts:
            continue
        written |= set(re.findall(r'(?:Audit\(|\.record\(|record_bounded\(|kind=)"([a-z_]+\.[a-z_]+)"',
                                  path.read_text()))
    assert written and written <= set(EVENT_KINDS), written - set(EVENT_KINDS)
