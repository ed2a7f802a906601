"""Bulkheads for agent calls (controller.bulkheads): one slow or hung node never delays another.

The first tests drive the bulkhead over plain callables on real threads; calls block on events,
and every claim is proven by events and counts, never by how long something took. The last
drive the real PoolService over a real SQLite store and real mutual-TLS gRPC agents (a hung
one, which accepts calls and never answers, and a quick one), as the controller runs.
"""
from __future__ import annotations

import logging
import threading
from concurrent.futures import CancelledError

import pytest

from controller.bulkheads import Bulkheads, Lane, NodeBusy
from controller.core.filling import LaneRoom

WAIT = 10.0   # only ever reached when the claim is false


class Calls:
    """Blocking calls that record when they start: each waits for its own event (or a shared one)."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.started: list[str] = []
        self.running: dict[str, int] = {}
        self.most: dict[str, int] = {}
        self.gates: dict[str, threading.Event] = {}

    def call(self, node: str, label: str, gate: threading.Event | None = None):
        gate = gate or self.gates.setdefault(label, threading.Event())

        def run() -> str:
            with self.lock:
                self.started.append(label)
                self.running[node] = self.running.get(node, 0) + 1
                self.most[node] = max(self.most.get(node, 0), self.running[node])
                self.lock.notify_all()
            try:
                assert gate.wait(WAIT), f"{label} was never let go"
            finally:
                with self.lock:
                    self.running[node] -= 1
            return label
        return run

    def wait_started(self, *labels: str) -> bool:
        with self.lock:
            return self.lock.wait_for(lambda: all(l in self.started for l in labels), WAIT)

    def wait_count(self, prefix: str, count: int) -> bool:
        with self.lock:
            return self.lock.wait_for(lambda: sum(l.startswith(prefix) for l in self.started) >= count, WAIT)


@pytest.fixture
def heads():
    made = []

    def make(**kw) -> Bulkheads:
        made.append(Bulkheads(**kw))
        return made[-1]
    yield make
    for h in made:
        h.shutdown(wait=False, cancel_futures=True)


def test_a_node_saturated_by_hung_calls_does_not_delay_another_node(heads):
    h = heads(max_workers=8, per_node=4, backlog=16)
    calls, hung = Calls(), threading.Event()
    for i in range(16):   # A's backfill lane full of calls that never end (until the test lets them go)
        h.submit("A", Lane.BACKFILL, calls.call("A", f"A-bf{i}", hung))
    assert calls.wait_count("A-bf", 3)
    for i in range(10):   # and its urgent lane backed up too
        h.submit("A", Lane.URGENT, calls.call("A", f"A-stop{i}", hung))
    assert calls.wait_count("A-", 4)
    b_urgent = h.submit("B", Lane.URGENT, calls.call("B", "B-od"))
    b_backfill = h.submit("B", Lane.BACKFILL, calls.call("B", "B-bf"))
    assert calls.wait_started("B-od", "B-bf")   # both ran while every call of A still hangs
    calls.gates["B-od"].set()
    calls.gates["B-bf"].set()
    assert b_urgent.result(WAIT) == "B-od" and b_backfill.result(WAIT) == "B-bf"
    assert not hung.is_set() and calls.most["A"] == 4   # A never had more than its share
    assert sum(l.startswith("A-bf") for l in calls.started) == 3   # one slot kept for A's urgent calls
    hung.set()


def test_a_nodes_stops_are_served_before_its_backfill_backlog(heads):
    h = heads(max_workers=8, per_node=4, backlog=16)
    calls = Calls()
    for i in range(12):
        h.submit("A", Lane.BACKFILL, calls.call("A", f"bf{i}"))
    assert calls.wait_started("bf0", "bf1", "bf2")
    h.submit("A", Lane.URGENT, calls.call("A", "stop0"))
    assert calls.wait_started("stop0")   # the slot backfill cannot take, at once
    h.submit("A", Lane.URGENT, calls.call("A", "od1"))
    h.submit("A", Lane.URGENT, calls.call("A", "stop2"))
    calls.gates["bf0"].set()             # one slot frees: the urgent calls go before bf3..bf11
    assert calls.wait_started("od1")
    calls.gates["bf1"].set()
    assert calls.wait_started("stop2")
    assert sorted(calls.started[:3]) == ["bf0", "bf1", "bf2"] and calls.started[3:] == ["stop0", "od1", "stop2"]
    for gate in calls.gates.values():
        gate.set()
    assert calls.wait_count("bf", 12)


def test_a_full_backfill_lane_refuses_backfill_never_urgent_calls_and_reports_busy(heads, caplog):
    drained, heard = [], threading.Event()
    h = heads(max_workers=8, per_node=4, backlog=5, on_drained=lambda node: (drained.append(node), heard.set()))
    calls = Calls()
    caplog.set_level(logging.INFO, logger="controller.bulkheads")
    for i in range(5):
        h.submit("A", Lane.BACKFILL, calls.call("A", f"bf{i}"))
    assert h.busy_nodes() == {"A"} and h.lane_room().room("A") == 0 and h.lane_room().room("B") == 5
    with pytest.raises(NodeBusy, match="node A's backfill lane is full"):
        h.submit("A", Lane.BACKFILL, calls.call("A", "bf-refused"))
    assert calls.wait_started("bf0", "bf1", "bf2")
    urgent = [h.submit("A", Lane.URGENT, calls.call("A", f"stop{i}")) for i in range(40)]   # never refused
    full = [r for r in caplog.records if r.getMessage() == "agent.backfill_lane_full"]
    assert len(full) == 1 and (full[0].node, full[0].backlog, full[0].backfill_queued + full[0].backfill_running) \
        == ("A", 5, 5)
    refused = [r for r in caplog.records if r.getMessage() == "agent.backfill_refused"]
    assert len(refused) == 1 and refused[0].refused == 1
    assert calls.wait_started("stop0")
    calls.gates["bf0"].set()   # one done: the lane has room again, and the launcher hears so
    assert calls.wait_count("stop", 2)
    assert heard.wait(WAIT) and drained == ["A"]
    assert h.busy_nodes() == frozenset() and h.lane_room().room("A") == 1
    for gate in calls.gates.values():
        gate.set()
    for i in range(40):
        calls.gates.setdefault(f"stop{i}", threading.Event()).set()
    assert [f.result(WAIT) for f in urgent] == [f"stop{i}" for i in range(40)]


def test_nodes_with_calls_waiting_are_served_in_turn(heads):
    h = heads(max_workers=4, per_node=2, backlog=4)
    calls, h1, h2 = Calls(), threading.Event(), threading.Event()
    for node, gate in (("H1", h1), ("H2", h2)):
        for i in range(2):
            h.submit(node, Lane.URGENT, calls.call(node, f"{node}-{i}", gate))
    assert calls.wait_count("H", 4)   # every thread busy
    for i in range(3):
        h.submit("X", Lane.URGENT, calls.call("X", f"X{i}"))
    h.submit("Y", Lane.URGENT, calls.call("Y", "Y0"))
    h2.set()   # two threads free: X's first call, then Y's, not X's second
    assert calls.wait_started("X0", "Y0")
    assert "X1" not in calls.started
    for gate in (h1, *calls.gates.values()):
        gate.set()
    assert calls.wait_started("X1", "X2")


def test_a_call_that_raises_never_kills_a_worker(heads, caplog):
    h = heads(max_workers=3, per_node=2)

    def broken() -> None:
        raise ValueError("a bug in the call")

    def fatal() -> None:
        raise SystemExit(3)   # not even this ends the thread it ran on

    failed = [h.submit("A", Lane.URGENT, broken if i % 2 else fatal) for i in range(12)]
    for future in failed:
        assert isinstance(future.exception(WAIT), (ValueError, SystemExit))
    assert h.submit("A", Lane.URGENT, lambda: "still serving").result(WAIT) == "still serving"
    assert h.submit("B", Lane.BACKFILL, lambda: "backfill too").result(WAIT) == "backfill too"
    assert len(h._threads) <= 3 and all(t.is_alive() for t in h._threads)
    assert sum(r.getMessage() == "agent.call_raised" for r in caplog.records) == 12


def test_shutdown_drains_queued_calls_then_refuses_new_ones(heads):
    h = heads(max_workers=4, per_node=2)
    calls = Calls()
    futures = [h.submit("A", lane, calls.call("A", f"c{i}")) for i, lane in
               enumerate([Lane.URGENT, Lane.BACKFILL] * 3)]
    assert calls.wait_count("c", 2)   # A's two slots taken, four calls queued
    stopper = threading.Thread(target=h.shutdown, kwargs=dict(wait=True))
    stopper.start()
    for i in range(6):
        calls.gates.setdefault(f"c{i}", threading.Event()).set()
    stopper.join(WAIT)
    assert not stopper.is_alive() and [f.result(0) for f in futures] == [f"c{i}" for i in range(6)]
    with pytest.raises(RuntimeError, match="after shutdown"):
        h.submit("A", Lane.URGENT, lambda: None)


def test_shutdown_with_cancel_cancels_the_queued_and_leaves_the_hung_running(heads):
    h = heads(max_workers=4, per_node=2)
    calls, hung = Calls(), threading.Event()
    running = h.submit("A", Lane.URGENT, calls.call("A", "hung0", hung))
    queued = [h.submit("A", Lane.URGENT, calls.call("A", f"q{i}", hung)) for i in range(1, 5)]
    assert calls.wait_started("hung0", "q1")
    h.shutdown(wait=False, cancel_futures=True)   # returns though two calls still hang
    assert all(f.cancelled() for f in queued[1:])
    with pytest.raises(CancelledError):
        queued[-1].result(0)
    hung.set()
    assert running.result(WAIT) == "hung0" and queued[0].result(WAIT) == "q1"
    for thread in h._threads:
        thread.join(WAIT)
        assert not thread.is_alive()
    assert calls.started == ["hung0", "q1"]


@pytest.mark.parametrize("kw, field", [(dict(max_workers=4, per_node=4), "per_node"),
                                       (dict(max_workers=8, per_node=1), "per_node"),
                                       (dict(max_workers=8, backlog=0), "backlog")])
def test_bulkhead_bounds_are_checked_naming_the_bound(kw, field):
    with pytest.raises(ValueError, match=field):
        Bulkheads(**kw)


def test_the_lane_room_caps_a_plan_per_node_and_names_the_busy():
    lanes = LaneRoom(3, {"A": 3, "B": 1})
    assert lanes.busy == {"A"} and lanes.room("C") == 3
    assert lanes.cap(("A", "A", "B", "B", "B", "C")) == ("B", "B", "C")
    assert LaneRoom().cap(("A",) * 9) == ("A",) * 9 and LaneRoom().busy == frozenset()


@pytest.mark.parametrize("values, key", [(dict(agent_calls=32, agent_calls_per_node=32), "agent_calls_per_node"),
                                         (dict(agent_calls_per_node=1), "agent_calls_per_node"),
                                         (dict(agent_calls=2), "agent_calls"),
                                         (dict(agent_backfill_backlog=0), "agent_backfill_backlog")])
def test_the_bulkhead_settings_are_checked_naming_the_key(values, key):
    from controller.config import check_config, parse_config
    from gleaner_common.config import ConfigError
    config = parse_config({"controller": {"listen": "127.0.0.1:7450", **values}, "tls": {"insecure": True}}, "c.toml")
    with pytest.raises(ConfigError, match=f"c.toml: controller.{key} (must be within|.* must be less than)"):
        check_config(config, "c.toml")
