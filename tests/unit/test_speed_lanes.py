"""NodeLanes.call's short cuts (an idle node; fewer calls ahead than a limit) answer exactly as the
full search over the calls' spans did: checked against that search, kept here as the reference, on
random sequences of calls."""
from __future__ import annotations

import random

import pytest

from controller.sim.agents import Call, NodeLanes


def reference_call(lanes: NodeLanes, node_id: str, now: float, seconds: float, backfill: bool, stop: bool) -> float:
    """NodeLanes.call as it was before its short cuts: every answer through _free."""
    calls = [c for c in lanes.calls.get(node_id, ()) if c.end > now]
    ahead = calls if backfill else [c for c in calls if not (c.backfill and c.entry > now)]
    lane = [c for c in ahead if c.backfill == backfill]
    entry = lanes._free(ahead, max([now] + [c.entry for c in lane]), lambda c: (c.entry, c.end),
                        lanes.per_node, (lanes.per_node - 1) if backfill else 0)
    start = entry
    if stop:
        stops = [c for c in ahead if c.stop]
        start = lanes._free(stops, max([entry] + [c.start for c in stops if c.entry <= entry]),
                            lambda c: (c.start, c.end), lanes.parallel_stops, 0)
    calls.append(Call(entry, start, start + seconds, backfill, stop))
    lanes.calls[node_id] = calls
    return (start - now) + seconds


@pytest.mark.parametrize("per_node,parallel_stops", [(2, 0), (4, 0), (4, 1), (3, 2), (8, 0)])
@pytest.mark.parametrize("seed", range(6))
def test_calls_answer_as_the_full_search_does(per_node: int, parallel_stops: int, seed: int) -> None:
    draws = random.Random(seed)
    fast, slow = NodeLanes(per_node, parallel_stops), NodeLanes(per_node, parallel_stops)
    now, waited = 0.0, 0
    for _ in range(3000):
        now += draws.choice((0.0, 0.0, draws.random() * 0.2, draws.random() * 2.0))   # bursts at one instant
        node = f"n{draws.randrange(3)}"
        seconds = draws.choice((0.0, draws.lognormvariate(1.0, 0.5)))
        backfill = draws.random() < 0.5
        stop = not backfill and draws.random() < 0.6
        expected = reference_call(slow, node, now, seconds, backfill, stop)
        assert fast.call(node, now, seconds, backfill, stop) == expected
        assert fast.calls == slow.calls
        waited += expected > seconds
    assert waited > 10   # the sequences queue calls, so the full search is exercised too
