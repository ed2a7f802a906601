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

from .policy import NodeView, rows_where
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
        regrouped = not self.states or any((n in self.position) != (n in nodes and nodes[n].state == "up")
                                           for n in changed)
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
        windows = self.windows
        for i in stale:
            recent = tuple(self.states[i].fg_samples)[-window:]
            if recent != windows[i] or window != self.window:
                windows[i] = recent
                recompute.append(i)
                samples.append(recent)
        self.window = window
        if recompute:
            _set_rows(self.predicted, recompute, predictions(samples, window))
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


def _set_rows(array: np.ndarray, rows: list[int], values: np.ndarray) -> None:
    """array[rows] = values; a few rows one item at a time (a fancy index costs more)."""
    if len(rows) > 8:
        array[rows] = values
        return
    for i, value in zip(rows, values.tolist()):
        array[i] = value


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
    # moving_average's figures in plain floats (a pass runs this for the few nodes that reported):
    # the padding is 0 rather than NaN and counted out, NaN samples are zeroed and counted out, so
    # each row sums the numbers nansum sums, in numpy's order (numpy_row_sum), and the quotient is
    # the same.
    out = []
    for node_samples in sample_lists:
        recent = list(node_samples)[-window:]
        count = len(recent)
        padded = [0.0] * (window - count) + recent
        total = numpy_row_sum(padded)
        if total != total:   # NaN: a sample is missing (NaN), or infinities cancelled (summed again alike)
            missing = sum(1 for value in recent if value != value)   # NaN is not equal to itself
            count -= missing
            total = numpy_row_sum([0.0 if value != value else value for value in padded])
        out.append(total / count if count > 0 else 0.0)
    return np.array(out, dtype=float)


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
