"""Volunteer selection's per-node inputs as arrays, updated row by row.

A selection pass runs before every backfill fill, and in a pool of 1,000 nodes rebuilding every
node's prediction and room each time was most of the launcher's cost. The rows here are kept
aligned to the up nodes and recomputed only for the nodes that reported since the last pass (their
foreground samples changed) or whose view the ledger rebuilt (their leases, capacity, reserve or
state changed); every figure is computed as before, row by row, so the selection is the same.
"""
from __future__ import annotations

import math
from collections.abc import Collection, Iterator, Mapping, Sequence
from operator import attrgetter
from typing import Protocol

import numpy as np

from .snapshot import NodeView, rows_where
from .selection import moving_average


class SampledNode(Protocol):
    """What the rows read of a node's state (controller.core.ledger.NodeState)."""
    state: str
    last_report: float
    fg_samples: Sequence[float]


class SelectionRows:
    def __init__(self) -> None:
        self.ids: list[str] = []          # the up nodes, in the ledger's order of nodes
        self.position: dict[str, int] = {}
        self.states: list[SampledNode] = []
        self.reported_at = np.zeros(0)    # each node's last report when its prediction was computed
        self.computed_at = -math.inf      # the time of the last pass
        self.predicted = np.zeros(0)      # moving average of foreground CPU, in cores
        self.cpu_max = np.zeros(0)
        self.free_memory = np.zeros(0)    # memory less the reserve and on-demand VMs, in MiB
        self.excluded = np.zeros(0, dtype=bool)
        self.figures: list[tuple[float, float, bool]] = []
        self.windows: list[tuple[float, ...] | None] = []
        self.totals: list[float | None] = []   # each window's exact_total (None: none, or not kept)
        self.window = 0

    def update(self, nodes: Mapping[str, SampledNode], views: Mapping[str, NodeView], changed: Collection[str],
               window: int, now: float, reported: Collection[str] | None = None) -> list[int] | None:
        """Bring the rows up to date at `now` (not earlier than the last pass). `changed` are the
        nodes whose view the ledger rebuilt since the last pass: a node's state changes with its
        view, so only they can join or leave the up nodes.

        `reported` are the nodes that reported since the last pass (the ledger keeps them: a
        prediction is a function of the node's samples, which only a report changes), their
        predictions are computed again. Without it, a node reported since the last pass if its last
        report is not the one seen then, or is not older than that pass (a report at the same
        instant), which reads every node's last report. A prediction whose samples are the ones
        it was computed from is kept (a node reports at every change of its VMs, often with the
        same foreground load as its last samples).

        Returns the rows whose figures may have changed, in order (None: every row): the rows whose
        prediction was computed again, and those whose view's figures changed (a node whose view
        was rebuilt for a change of its backfill VMs alone keeps its figures, and so its P)."""
        regrouped = not self.states or self._regrouped(nodes, changed)
        if regrouped:
            self._regroup(nodes)
            changed = self.ids
        if reported is None or regrouped:
            at = np.fromiter(map(attrgetter("last_report"), self.states), dtype=float, count=len(self.ids))
            stale = rows_where((at >= self.computed_at) | (at != self.reported_at)).tolist()
            self.reported_at = at
        else:   # a few rows: one numpy item at a time (a fancy index costs more)
            position, states, reported_at = self.position, self.states, self.reported_at
            stale = sorted(position[n] for n in reported if n in position)
            for i in stale:
                reported_at[i] = states[i].last_report
        recompute, samples = [], []
        windows, states = self.windows, self.states
        same_window = window == self.window
        for i in stale:
            recent = _last(states[i].fg_samples, window)
            if recent != windows[i] or not same_window:
                recompute.append(i)
                samples.append(recent)
        self.window = window
        if recompute:
            _set_rows(self.predicted, recompute, self._predictions(recompute, samples, window, same_window))
        self.computed_at = now
        touched = set(recompute)
        figures = self.figures
        for node_id in changed:
            i = self.position.get(node_id)
            if i is not None:
                view = views[node_id]
                cpu_max, excluded = view.capacity.vcpus, view.backfill_excluded
                free_memory = float(view.capacity.memory_mib - view.reserve.memory_mib) - \
                    float(view.on_demand_memory_mib)
                last = figures[i]
                if cpu_max != last[0] or free_memory != last[1] or excluded != last[2]:
                    self.cpu_max[i], self.free_memory[i], self.excluded[i] = cpu_max, free_memory, excluded
                    figures[i] = (cpu_max, free_memory, excluded)
                    touched.add(i)
        return None if regrouped else sorted(touched)

    def _regrouped(self, nodes: Mapping[str, SampledNode], changed: Collection[str]) -> bool:
        """Whether a changed node joined or left the up nodes (a loop: any() of a generator costs
        more for the few nodes a pass sees)."""
        position = self.position
        for node_id in changed:
            node = nodes.get(node_id)
            if (node_id in position) != (node is not None and node.state == "up"):
                return True
        return False

    def _predictions(self, rows: list[int], samples: list[tuple[float, ...]], window: int, same_window: bool
                     ) -> list[float]:
        """The rows' predictions from their new samples, which become the rows' windows. Row by row
        each window's exact total is kept, and found from the last one's after one report."""
        windows, totals = self.windows, self.totals
        if not 0 < window <= PAIRWISE_BLOCK:
            for i, recent in zip(rows, samples):
                windows[i], totals[i] = recent, None
            return predictions(samples, window).tolist()
        values = []
        for i, recent in zip(rows, samples):
            total = totals[i]
            if total is not None:
                total = _shifted_total(windows[i], total, recent) if same_window else None
            totals[i] = total = exact_total(recent) if total is None else total
            windows[i] = recent
            values.append(row_prediction(recent, window, total))
        return values

    def _regroup(self, nodes: Mapping[str, SampledNode]) -> None:
        self.ids = [n for n, node in nodes.items() if node.state == "up"]
        self.position = {node_id: i for i, node_id in enumerate(self.ids)}
        self.states = [nodes[n] for n in self.ids]
        count = len(self.ids)
        self.reported_at = np.full(count, np.nan)   # NaN equals nothing: every row is computed
        self.predicted, self.cpu_max, self.free_memory = np.zeros(count), np.zeros(count), np.zeros(count)
        self.excluded = np.zeros(count, dtype=bool)
        # each row's (cpu_max, free_memory, excluded) as written to those three arrays, in plain
        # values: compared per changed node without reading numpy items (only update writes them)
        self.figures: list[tuple[float, float, bool]] = [(0.0, 0.0, False)] * count
        self.windows = [None] * count   # the samples each row's prediction was computed from
        self.totals = [None] * count

    def by_node(self, values: np.ndarray) -> Mapping[str, float]:
        """Per-row values by node id, without a dict of every node per pass (nor a list: a pass
        reads a few of them). The caller no longer changes `values`."""
        return RowValues(self.position, values)


class RowValues(Mapping):
    """A node's figure from the last selection pass, by node id."""

    def __init__(self, position: Mapping[str, int], values: np.ndarray) -> None:
        self._position = position
        self._values = values

    def __getitem__(self, node_id: str) -> float:
        return float(self._values[self._position[node_id]])

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._position

    def __iter__(self) -> Iterator[str]:
        return iter(self._position)

    def __len__(self) -> int:
        return len(self._position)


def _set_rows(array: np.ndarray, rows: list[int], values: list[float]) -> None:
    """array[rows] = values; a few rows one item at a time (a fancy index costs more)."""
    if len(rows) > 8:
        array[rows] = values
        return
    for i, value in zip(rows, values):
        array[i] = value


def _last(samples: Sequence[float], window: int) -> tuple[float, ...]:
    """The last `window` samples (a node's deque holds at most the window: no second copy to slice)."""
    recent = tuple(samples)
    return recent if len(recent) <= window else recent[-window:]


def predictions(sample_lists: Sequence[Sequence[float]], window: int) -> np.ndarray:
    """The moving average of each node's last `window` samples (NaN-padded on the left, as one
    matrix of every node would be: each row's figure does not depend on the other rows)."""
    if window <= 0:
        samples = np.full((len(sample_lists), window), np.nan)
        for row, node_samples in enumerate(sample_lists):
            recent = list(node_samples)[-window:]
            if recent:
                samples[row, -len(recent):] = recent
        return moving_average(samples, window)
    if window > PAIRWISE_BLOCK:
        return _predictions_in_numpy(sample_lists, window)
    out = []
    for node_samples in sample_lists:
        recent = list(node_samples)[-window:]
        out.append(row_prediction(recent, window, exact_total(recent)))
    return np.array(out, dtype=float)


def row_prediction(recent: Sequence[float], window: int, total: float | None) -> float:
    """moving_average's figure for one row of at most `window` <= PAIRWISE_BLOCK samples, in plain
    floats; `total` is their exact_total. The padding is 0 rather than NaN and counted out, NaN
    samples are zeroed and counted out, so the row sums the numbers nansum sums, in numpy's order
    (numpy_row_sum), and the quotient is the same."""
    count = len(recent)
    if total:   # exact and not zero: numpy's sum whatever its order (a zero's sign depends on it)
        return total / count
    padded = [0.0] * (window - count) + list(recent)
    total = numpy_row_sum(padded)
    if total != total:   # NaN: a sample is missing (NaN), or infinities cancelled (summed again alike)
        missing = sum(1 for value in recent if value != value)   # NaN is not equal to itself
        count -= missing
        total = numpy_row_sum([0.0 if value != value else value for value in padded])
    return total / count if count > 0 else 0.0


# Integer samples (the simulator's foreground is on-demand vCPUs) are summed exactly: if each is an
# integer of magnitude at most SMALL and a row has at most PAIRWISE_BLOCK = 2**7 of them, every
# partial sum, in any order and with any zeros of padding, is an integer of magnitude at most
# 2**53, which a float holds exactly; an addition whose operands and true result are exact floats
# is exact, so every order of summation (numpy's pairwise one, the built-in sum's, a running total's)
# gives the true sum, to the last bit. The one exception is a zero's sign (-0.0 + -0.0 is -0.0,
# 0.0 + -0.0 is 0.0, and numpy_row_sum starts some rows at 0.0): a zero total is summed numpy's way.
SMALL = 2.0 ** 46


def exact_total(samples: Sequence[float]) -> float | None:
    """The sum of 1 to PAIRWISE_BLOCK `samples` if each is a float holding an integer of magnitude at
    most SMALL (then it is exact), else None (NaN and infinities are not integers)."""
    try:
        if 0 < len(samples) <= PAIRWISE_BLOCK and all(map(float.is_integer, samples)) and \
                -SMALL <= min(samples) and max(samples) <= SMALL:
            return sum(samples, 0.0)
    except TypeError:   # not a float (is_integer is float's)
        pass
    return None


def _shifted_total(old: tuple[float, ...] | None, total: float, recent: tuple[float, ...]) -> float | None:
    """recent's exact_total from `total`, old's, when recent is old with one sample appended (and,
    the window being full, its first dropped): one report since the last pass. Else None."""
    new = recent[-1] if recent else None
    if old is None or type(new) is not float or not new.is_integer() or not -SMALL <= new <= SMALL:
        return None
    if len(recent) == len(old) and recent[:-1] == old[1:]:
        return total - old[0] + new
    if len(recent) == len(old) + 1 and recent[:-1] == old:
        return total + new
    return None


PAIRWISE_BLOCK = 128   # numpy's pairwise summation sums rows up to this long in one block


def numpy_row_sum(values: Sequence[float]) -> float:
    """The sum of a row of at most PAIRWISE_BLOCK floats as numpy sums a float64 row (its
    pairwise summation: eight running sums, combined in pairs, then the rest one by one), to
    the last bit; tests/unit/test_fast_paths.py checks it against numpy."""
    count = len(values)
    if count < 8:
        total = 0.0
        for value in values:
            total += value
        return total
    sums = list(values[:8])
    whole = count - count % 8
    for start in range(8, whole, 8):
        for lane in range(8):
            sums[lane] += values[start + lane]
    total = ((sums[0] + sums[1]) + (sums[2] + sums[3])) + ((sums[4] + sums[5]) + (sums[6] + sums[7]))
    for value in values[whole:]:
        total += value
    return total


def _predictions_in_numpy(sample_lists: Sequence[Sequence[float]], window: int) -> np.ndarray:
    """predictions' figures with one matrix (for windows longer than numpy's summation block)."""
    rows = len(sample_lists)
    filled = np.zeros((rows, window))
    counts = np.zeros(rows, dtype=np.int64)
    for row, node_samples in enumerate(sample_lists):
        recent = list(node_samples)[-window:]
        if recent:
            filled[row, -len(recent):] = recent
            counts[row] = len(recent)
    missing = np.isnan(filled)
    if missing.any():
        filled[missing] = 0.0
        counts -= missing.sum(axis=1)
    return np.divide(filled.sum(axis=1), counts, out=np.zeros(rows), where=counts > 0)
