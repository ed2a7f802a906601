"""What a live controller's recording says of its agents and its launcher: the figures the
prediction (controller/sim/replay.py, predict) fits the simulator's modelled agents to, and the
reckoning of each agent call's own service time out of the recorded delays (a node's calls queue
in its agent-call lane, and the agent answers a batch of stops in an order of its own)."""
from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..core.records import FILL_EVENTS

if TYPE_CHECKING:
    from .replay_load import Recording


def answer_figures(recording: Recording) -> dict[str, float]:
    """What the recording says of the agents, with the controller's own time on a launch (which
    the simulator's books take at once) added where a request waits for it:
    - launch_p50_s, launch_p99_s: each on-demand launch's time as its request saw it: the
      controller's booking (request to launch call: the decision and its commit; for a launch
      that waited for its victims, the median booking), the agent's answer delay (the lane it goes
      through is never queued behind backfill), and the commit of the answer (answer to running);
    - controller_s: the median of the booking plus the commit;
    - backfill_launch_p50_s, backfill_launch_p99_s: the backfill launches' delays, for the record
      (a node's backfill launches queue in its agent-call lane);
    - refill_launch_p50_s, refill_launch_p99_s: the same once requests began (the first fill's
      hundreds of launches at once left out), which the modelled agents' backfill launches take;
    - stop_p50_s, stop_p99_s: the clean stops' delays; launch_failure_share;
    - fill_delay_s: the median time from an event that asks for a fill (FILL_EVENTS; the first,
      when several came before it) to the fill that served it."""
    lines = recording.lines
    asked = {line["key"]: line["t"] for line in lines if line["kind"] == "launch"}
    running = {line["key"]: line["t"] for line in lines if line["kind"] == "event" and line["event"] == "vm.launched"}
    requested = {r["rid"]: r["t"] for r in recording.requests}
    at_once = [line for line in lines if line["kind"] == "event" and line["event"] == "request.placed"
               and line.get("path") in ("free", "instant")]
    booked = {line["key"]: asked[line["key"]] - requested[line["request_id"]] for line in at_once
              if line["key"] in asked and line["request_id"] in requested}
    booking = quantile(list(booked.values()), 0.5)
    launches = [a for answers in recording.launch_answers.values() for a in answers]
    on_demand = [a for a in launches if a["key"].startswith("od:")]
    committed = {a["key"]: running[a["key"]] - a["t"] for a in on_demand if a["key"] in running}
    parallel = agent_parallel_stops(recording)
    service = service_times(recording, parallel)
    seen = [booked.get(a["key"], booking) + service[id(a)] + committed.get(a["key"], 0.0) for a in on_demand]
    backfill_answers = [a for a in launches if a["key"].startswith("bf:")]
    backfill = [a["delay_s"] for a in backfill_answers]
    first_request = min(requested.values(), default=0.0)
    refills = [a["delay_s"] for a in backfill_answers if a["t"] > first_request]
    stop_answers = [a for answers in recording.stop_answers.values() for a in answers if a["ok"]]
    stops, stop_delays = [service[id(a)] for a in stop_answers], [a["delay_s"] for a in stop_answers]
    return dict(controller_s=booking + quantile(list(committed.values()), 0.5),
                launch_p50_s=quantile(seen, 0.5), launch_p99_s=quantile(seen, 0.99),
                backfill_launch_p50_s=quantile(backfill, 0.5), backfill_launch_p99_s=quantile(backfill, 0.99),
                refill_launch_p50_s=quantile(refills, 0.5), refill_launch_p99_s=quantile(refills, 0.99),
                stop_p50_s=quantile(stops, 0.5), stop_p99_s=quantile(stops, 0.99),
                stop_delay_p50_s=quantile(stop_delays, 0.5), stop_delay_p99_s=quantile(stop_delays, 0.99),
                agent_parallel_stops=parallel, fill_delay_s=fill_delay(lines),
                launch_failure_share=sum(not a["ok"] for a in launches) / len(launches) if launches else 0.0)


FILL_WAKE_MAX_S = 1.0   # a fill this long after what asked for it was not that ask's (the periodic one)


def fill_delay(lines: Sequence[Mapping[str, Any]]) -> float:
    """The median time from the first event that asked for a fill (FILL_EVENTS, while backfill was
    on: with it off and no request waiting the controller asks for none) to the fill job that came
    next, within FILL_WAKE_MAX_S. It holds the launcher thread's wake-up and the fill's own
    computing and commit (the job line is written once the fill is carried out). 0.0 when no such
    pair is recorded."""
    delays: list[float] = []
    asked, backfill_on = None, False
    for line in lines:
        kind = line["kind"]
        if kind in ("start", "backfill"):
            backfill_on = bool(line["backfill"].get("enabled"))
        elif kind == "event" and line["event"] in FILL_EVENTS and asked is None and backfill_on:
            asked = line["t"]
        elif kind == "job" and line["name"] == "fill" and asked is not None:
            if line["t"] - asked <= FILL_WAKE_MAX_S:
                delays.append(line["t"] - asked)
            asked = None
    return quantile(delays, 0.5) if delays else 0.0


BATCH_S = 0.003         # stops asked within this long of each other on one node: a batch
MIN_SERVICE_S = 0.0002  # a call's service time is never taken below this (the clock's grain)


def _calls(recording: Recording) -> dict[str, list[tuple[float, float, dict[str, Any]]]]:
    """Each node's answered calls as (asked, answered, the answer line), in the order asked
    (asked: the answer's time less its delay, which for a stop held for a launch is that launch's answer)."""
    calls: dict[str, list[tuple[float, float, dict[str, Any]]]] = defaultdict(list)
    for line in recording.lines:
        if line["kind"] in ("launch_answer", "stop_answer"):
            calls[line["node"]].append((line["t"] - line["delay_s"], line["t"], line))
    for node_calls in calls.values():
        node_calls.sort(key=lambda c: c[0])
    return calls


def agent_parallel_stops(recording: Recording) -> int:
    """How many stops a node's agent works on at once, from the batches of stops asked together of
    a node with no other call (a request's victims): if the agent worked on them all at once the
    batch would take about as long as one stop alone; one at a time, as long as all of them. The
    estimate: the batches' stops times the median lone stop, over the batches' spans, rounded
    (at least 1). 0 when the recording has no batch of 2 or more."""
    alone: list[float] = []
    work = span = 0.0
    for node_calls in _calls(recording).values():
        for i, j in _asked_together(node_calls):
            asked, batch = node_calls[i][0], node_calls[i:j]
            busy = any(a < asked < b for a, b, _line in node_calls[:i])
            if not busy and all(c[2]["kind"] == "stop_answer" for c in batch):
                if len(batch) == 1:
                    alone.append(batch[0][1] - asked)
                else:
                    work += len(batch)
                    span += max(c[1] for c in batch) - asked
    if not work or not alone or not span:
        return 0
    return max(1, round(work * quantile(alone, 0.5) / span))


def service_times(recording: Recording, parallel: int) -> dict[int, float]:
    """Each answer's (by id of its line) service time: its delay, for a stop less the time it
    waited for the node's agent, which works on `parallel` stops at once (0: on every stop at
    once, no wait) in the order they were asked: the stop began when it was asked, or when the
    earliest of the stops ahead of it on a busy agent answered. The stops of a batch (a
    request's victims, asked together of one node) each take the batch's mean: the agent answers
    them in an order of its own, which this reckoning cannot see, and it split a batch's time
    into stops of 0.2 ms and of 25 to 45 ms. Drawn one by one, such times made the prediction's
    wait for 7 victims vary far more than the live waits did (p99 135 against 114 ms; with the
    batches' means, 120 ms)."""
    out: dict[int, float] = {}
    for node_calls in _calls(recording).values():
        free: list[float] = [0.0] * max(parallel, 1)   # when each of the agent's places frees
        for asked, answered, line in node_calls:
            if line["kind"] != "stop_answer" or not parallel:
                out[id(line)] = line["delay_s"]
                continue
            began = max(asked, heapq.heappop(free))
            heapq.heappush(free, max(answered, began))
            out[id(line)] = max(answered - min(began, answered), MIN_SERVICE_S)
        for batch in _stop_batches(node_calls) if parallel else ():
            mean = sum(out[id(line)] for line in batch) / len(batch)
            for line in batch:
                out[id(line)] = mean
    return out


def _asked_together(node_calls: Sequence[tuple[float, float, dict[str, Any]]]) -> list[tuple[int, int]]:
    """A node's calls (in the order asked) in groups asked within BATCH_S of the group's first,
    as [start, end) index ranges."""
    groups, i = [], 0
    while i < len(node_calls):
        j = i + 1
        while j < len(node_calls) and node_calls[j][0] - node_calls[i][0] < BATCH_S:
            j += 1
        groups.append((i, j))
        i = j
    return groups


def _stop_batches(node_calls: Sequence[tuple[float, float, dict[str, Any]]]) -> list[list[dict[str, Any]]]:
    """A node's batches of two or more stops asked together (their answer lines)."""
    batches = []
    for i, j in _asked_together(node_calls):
        stops = [line for _asked, _answered, line in node_calls[i:j] if line["kind"] == "stop_answer"]
        if len(stops) > 1:
            batches.append(stops)
    return batches


def quantile(values: Sequence[float], q: float) -> float:
    """Nearest rank (0.0 for none)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))] if ordered else 0.0
