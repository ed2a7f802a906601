"""Two recordings of the same inputs compared (controller/recording.py's format): a live run
and its replay one by one, and a live run and a prediction in aggregate.

One by one (`compare`). For every on-demand request of the live run, two items:
- its placement: the outcome (placed, rejected, or still queued), the node and the path (free,
  instant, after_victims);
- its victims: the backfill VMs it preempted, as stable keys (bf:NODE#N: the Nth backfill VM the
  books made on NODE), compared as sets.
`identical_share` is the share of items the replay reproduced. Each difference comes with what
explains it (`explain`): the pools already differed before the decision (and how), the victims'
launches were answered in another order, or the replay asked an agent for something the live
run never did (its answer was modelled). Beside the items: the backfill VMs made per node
(refills included), which are not in the share.

In aggregate (`aggregates`): preemptions (victims confirmed stopped), the on-demand wait (from
the request to its VM's launch answer) at p50 and p99, and the work lost (vCPU-seconds of the
victims' runtime); `prediction_error` is the largest relative difference.
"""
from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..recording import TERMINAL_EVENTS

STATE_EVENTS = {"vm.launched": "running", "vm.preempting": "victim", "vm.stopping": "stopping",
                "vm.cancelling": "cancelling", "request.victims_gone": "starting", "vm.lost": "lost",
                "vm.recovered": "running"}
RACE_SECONDS = 0.05   # answers this close together may come in either order


@dataclass(frozen=True)
class Decision:
    request_id: str
    outcome: str                   # placed | rejected | queued
    node: str = ""
    path: str = ""
    victims: tuple[str, ...] = ()
    index: int = -1                # the line of the decision in its recording
    t: float = 0.0


def decisions(lines: Sequence[Mapping[str, Any]]) -> dict[str, Decision]:
    """Each request's decision: placed (at once or after waiting), rejected, or still queued."""
    out: dict[str, Decision] = {}
    for i, line in enumerate(lines):
        if line.get("kind") != "event":
            continue
        event, rid = line["event"], line.get("request_id", "")
        if event == "request.placed":
            out[rid] = Decision(rid, "placed", line["node"], line.get("path", ""),
                                tuple(sorted(line.get("victims", ()))), i, line["t"])
        elif event == "request.rejected":
            out[rid] = Decision(rid, "rejected", index=i, t=line["t"])
        elif event == "request.queued" and rid not in out:
            out[rid] = Decision(rid, "queued", index=i, t=line["t"])
    return out


class PoolStates:
    """Each lease's state (by key) after every line of a recording, read from its lease lines and
    audit events: what each node held when a decision was made."""

    def __init__(self, lines: Sequence[Mapping[str, Any]]) -> None:
        self.lines = lines
        self.launched_at: dict[str, float] = {}   # key -> when its launch was answered (vm.launched)

    def before(self, index: int, own: str = "") -> dict[str, tuple[str, str]]:
        """key -> (node, state) of every live lease just before line `index` (`own`: the lease the
        decision at that line made, written just before it, left out)."""
        state: dict[str, tuple[str, str]] = {}
        for line in self.lines[:index]:
            kind = line.get("kind")
            if kind == "lease" and line["key"] != own:
                state[line["key"]] = (line["node"], line.get("state", "starting"))
            elif kind == "event" and line.get("key") in state:
                key, event = line["key"], line["event"]
                if event in TERMINAL_EVENTS:
                    del state[key]
                elif event in STATE_EVENTS:
                    state[key] = (state[key][0], STATE_EVENTS[event])
        return state

    def history(self, key: str, at: float, window: float) -> list[tuple[str, float]]:
        """What happened to a lease up to a decision at `at`: made, then its audit events, with
        their times; and what came of the calls made before it within `window` after (its being
        made and its launch's answer), which another run may have seen just before the decision."""
        out = []
        for line in self.lines:
            t = line["t"]
            if t > at + window:
                break
            if line.get("key") != key:
                continue
            if line.get("kind") == "lease":
                out.append(("made", t))
            elif line.get("kind") == "event" and (t < at or line["event"] == "vm.launched"):
                out.append((line["event"], t))
        return out

    def launch_times(self) -> dict[str, float]:
        if not self.launched_at:
            self.launched_at = {line["key"]: line["t"] for line in self.lines
                                if line.get("kind") == "event" and line["event"] == "vm.launched"}
        return self.launched_at


@dataclass
class Comparison:
    items: int = 0
    identical: int = 0
    differences: list[dict[str, Any]] = field(default_factory=list)
    backfill_made: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def identical_share(self) -> float:
        return self.identical / self.items if self.items else 1.0

    @property
    def unexplained(self) -> int:
        return sum(1 for d in self.differences if d["explained"] is False)

    def as_dict(self) -> dict[str, Any]:
        return dict(items=self.items, identical=self.identical, identical_share=round(self.identical_share, 4),
                    differences=self.differences, unexplained=self.unexplained, backfill_made=self.backfill_made)


def compare(live: Sequence[Mapping[str, Any]], replayed: Sequence[Mapping[str, Any]],
            unrecorded: Sequence[tuple[str, str, float]] = ()) -> Comparison:
    """The replay's decisions against the live ones, item by item (the module's doc).
    `unrecorded`: the calls the replay made that the live run had no answer for."""
    ours, theirs = decisions(live), decisions(replayed)
    live_states, replay_states = PoolStates(live), PoolStates(replayed)
    result = Comparison()
    first: str | None = None
    for rid, want in sorted(ours.items(), key=lambda item: item[1].index):
        got = theirs.get(rid, Decision(rid, "absent"))
        for item, same in (("placement", (want.outcome, want.node, want.path) == (got.outcome, got.node, got.path)),
                           ("victims", want.victims == got.victims)):
            if item == "victims" and not (want.victims or got.victims):
                continue
            result.items += 1
            if same:
                result.identical += 1
                continue
            why, explained = explain(want, got, live_states, replay_states, unrecorded, first)
            result.differences.append(dict(request_id=rid, item=item, live=_shown(want, item),
                                           replay=_shown(got, item), explanation=why, explained=explained))
            first = first or rid
    result.backfill_made = backfill_made(live, replayed)
    return result


def _shown(decision: Decision, item: str) -> Any:
    if item == "victims":
        return list(decision.victims)
    return dict(outcome=decision.outcome, node=decision.node, path=decision.path)


def explain(live: Decision, replay: Decision, live_states: PoolStates, replay_states: PoolStates,
            unrecorded: Sequence[tuple[str, str, float]], first: str | None) -> tuple[str, bool]:
    """Why a decision differs: (what explains it, whether that is a known cause)."""
    if replay.outcome == "absent":
        return "the replay never decided this request (it ended before, or the request never came)", False
    own = f"od:{live.request_id}"
    before_live, before_replay = live_states.before(live.index, own), replay_states.before(replay.index, own)
    if before_live != before_replay:
        return _pools_differed(live, replay, before_live, before_replay, live_states, replay_states, first)
    calls = [f"{call} of {key}" for call, key, at in unrecorded if at <= replay.t]
    if calls:
        return f"the replay asked agents for calls the live run never made, answered by the model: {_few(calls)}", True
    order = _victims_order(live, replay, live_states, replay_states)
    if order is not None:
        return order
    return "the same pool state before the decision, yet another decision", False


def _pools_differed(live: Decision, replay: Decision, before_live: Mapping[str, tuple[str, str]],
                    before_replay: Mapping[str, tuple[str, str]], live_states: PoolStates,
                    replay_states: PoolStates, first: str | None) -> tuple[str, bool]:
    """The pools differed before the decision: after an earlier difference (it follows), or only in
    the timing of the same steps (each within RACE_SECONDS, on either side of the decision)."""
    keys = sorted(k for k in set(before_live) | set(before_replay) if before_live.get(k) != before_replay.get(k))
    shown = "; ".join(f"{k}: live {_state(before_live.get(k))}, replay {_state(before_replay.get(k))}"
                      for k in keys[:4]) + (f"; and {len(keys) - 4} more" if len(keys) > 4 else "")
    if first:
        return f"follows from the difference at request {first}: the pools differed before it ({shown})", True
    # up to a moment after the decision: a step that came just after it in one run and just
    # before it in the other is the same step
    histories = {k: (live_states.history(k, live.t, RACE_SECONDS), replay_states.history(k, replay.t, RACE_SECONDS))
                 for k in keys}
    told = "; ".join(f"{k}: live {_timeline(a)} / replay {_timeline(b)}" for k, (a, b) in list(histories.items())[:3])
    if all(_same_but_timing(a, b) for a, b in histories.values()):
        return (f"the pools differed before this decision only in timing: the same steps, each within "
                f"{RACE_SECONDS * 1000:.0f} ms, came on either side of it ({shown}; {told})"), True
    return f"the pools differed before this decision ({shown}; {told})", False


def _victims_order(live: Decision, replay: Decision, live_states: PoolStates,
                   replay_states: PoolStates) -> tuple[str, bool] | None:
    """The candidate victims' launches answered in another order (a race if the swapped ones were
    within RACE_SECONDS live), or None."""
    victims = sorted(set(live.victims) | set(replay.victims))
    live_at, replay_at = live_states.launch_times(), replay_states.launch_times()
    if not victims or not all(v in live_at and v in replay_at for v in victims):
        return None
    live_order, replay_order = sorted(victims, key=live_at.__getitem__), sorted(victims, key=replay_at.__getitem__)
    if live_order == replay_order:
        return None
    # the pairs of candidates answered in one order live and the other in the replay
    swapped = [(a, b) for a in victims for b in victims if live_at[a] < live_at[b] and replay_at[a] > replay_at[b]]
    gap = max((live_at[b] - live_at[a] for a, b in swapped), default=0.0)
    return (f"the candidate victims' launches were answered in another order (live {live_order}, replay "
            f"{replay_order}; the pairs swapped were up to {gap * 1000:.1f} ms apart live): most_recent takes "
            f"the youngest"), gap <= RACE_SECONDS


def _state(value: tuple[str, str] | None) -> str:
    return "none" if value is None else f"{value[1]} on {value[0]}"


def _timeline(history: list[tuple[str, float]]) -> str:
    return ", ".join(f"{what} {t:.3f}" for what, t in history) or "never made"


def _same_but_timing(a: list[tuple[str, float]], b: list[tuple[str, float]]) -> bool:
    """The same steps in the same order, each within RACE_SECONDS."""
    return len(a) == len(b) and all(x[0] == y[0] and abs(x[1] - y[1]) <= RACE_SECONDS for x, y in zip(a, b))


def _few(items: Sequence[str], limit: int = 6) -> str:
    if not items:
        return "nothing else"
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


def backfill_made(live: Sequence[Mapping[str, Any]], replayed: Sequence[Mapping[str, Any]]) -> dict[str, dict]:
    """Backfill VMs the books made per node (refills included), live and replayed. A live one
    recorded after the recording's last job line was made by a job whose line never came (the
    recording was read, or the controller stopped, mid-fill): the replay cannot run that job,
    so it is counted apart, as "cut"."""
    counts: dict[str, dict[str, int]] = defaultdict(lambda: {"live": 0, "replay": 0})
    last_job = max((i for i, line in enumerate(live) if line.get("kind") == "job"), default=len(live))
    for which, lines in (("live", live), ("replay", replayed)):
        for index, line in enumerate(lines):
            if line.get("kind") == "lease" and line["role"] == "backfill":
                key = "cut" if which == "live" and index > last_job else which
                counts[line["node"]][key] = counts[line["node"]].get(key, 0) + 1
    return dict(sorted(counts.items()))


# -- aggregates -----------------------------------------------------------------------------------

def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest rank."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def aggregates(lines: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """preemptions, on-demand wait p50 and p99 (request to launch answer, seconds) and lost work
    (vCPU-seconds) of a recording."""
    asked = {line["rid"]: line["t"] for line in lines if line.get("kind") == "request"}
    waits, preemptions, lost = [], 0, 0.0
    for line in lines:
        if line.get("kind") != "event":
            continue
        if line["event"] == "vm.preempted":
            preemptions += 1
            lost += line.get("work_lost_vcpu_seconds", 0.0)
        elif line["event"] == "vm.launched" and line.get("role") == "on_demand" and line.get("request_id") in asked:
            waits.append(line["t"] - asked[line["request_id"]])
    return dict(preemptions=preemptions, wait_p50_s=percentile(waits, 50), wait_p99_s=percentile(waits, 99),
                lost_work_vcpu_s=round(lost, 3), placed=len(waits))


def waits(lines: Sequence[Mapping[str, Any]]) -> list[float]:
    """The on-demand waits of a recording (request to launch answer, seconds), as aggregates counts them."""
    asked = {line["rid"]: line["t"] for line in lines if line.get("kind") == "request"}
    return [line["t"] - asked[line["request_id"]] for line in lines
            if line.get("kind") == "event" and line["event"] == "vm.launched" and line.get("role") == "on_demand"
            and line.get("request_id") in asked]


def p99_spread(values: Sequence[float], draws: int = 2000, seed: int = 0) -> dict[str, Any]:
    """How far a p99 of this many values moves by chance: the bootstrap (the values drawn again
    with replacement, `draws` times, seeded) 5th, 50th and 95th percentiles of the p99, and the
    half-width of that 90 % interval relative to the p99 itself (beside prediction_error: a
    relative error within it is within the live figure's own noise). With ~150 waits the p99 is
    the second-largest, and its interval spans the few largest waits."""
    if not values:
        return dict(p99=None, bootstrap_p5=None, bootstrap_p50=None, bootstrap_p95=None, relative_half_width=None)
    draw = random.Random(seed).choices
    p99s = sorted(percentile(draw(values, k=len(values)), 99) for _ in range(draws))
    p99 = percentile(values, 99)
    low, mid, high = (p99s[int(q * (draws - 1))] for q in (0.05, 0.5, 0.95))
    return dict(p99=round(p99, 4), bootstrap_p5=round(low, 4), bootstrap_p50=round(mid, 4),
                bootstrap_p95=round(high, 4), relative_half_width=round((high - low) / 2 / p99, 4) if p99 else None)


def mean_aggregates(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Each figure's mean over runs (of one model with different seeds): the model's expectation."""
    return {name: round(sum(run[name] or 0.0 for run in runs) / len(runs), 6) for name in runs[0]}


PREDICTED = ("preemptions", "wait_p50_s", "wait_p99_s", "lost_work_vcpu_s")


def prediction_error(live: Mapping[str, Any], predicted: Mapping[str, Any]) -> tuple[float, dict[str, float]]:
    """The largest relative difference |predicted - live| / live over PREDICTED, and each one
    (a figure that is 0 live: 0 if predicted 0 too, else 1)."""
    parts = {}
    for name in PREDICTED:
        a, b = live.get(name) or 0.0, predicted.get(name) or 0.0
        parts[name] = round(abs(b - a) / abs(a), 4) if a else (0.0 if not b else 1.0)
    return max(parts.values()), parts
