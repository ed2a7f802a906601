"""Volunteer selection (RHIC, section 4.2), as pure functions over arrays.

Per node, foreground CPU demand is predicted with a moving average of recent samples. A node's
potential productivity is P = min(CPU_max - CPU_fg_predicted, 1 core x slots), where slots are
the backfill VMs that fit in the memory foreground VMs and the reserve leave. Nodes are taken
greedily by P; a used node is swapped for an unused one only when the unused one's P is higher
by more than a threshold (so small wobbles do not churn VMs); and while nodes come and go in a
burst, the previous selection stands until the evaluation interval ends.
"""
from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .snapshot import rows_where
from .records import plain_init


def moving_average(samples: np.ndarray, window: int) -> np.ndarray:
    """Mean of each row's last `window` samples, ignoring NaN (missing) entries; 0 for none."""
    if samples.ndim != 2:
        raise ValueError("samples must be a 2-D array: one row per node")
    recent = samples[:, -window:] if window > 0 else samples
    counts = np.sum(~np.isnan(recent), axis=1)
    sums = np.nansum(recent, axis=1)
    return np.divide(sums, counts, out=np.zeros(len(recent)), where=counts > 0)


def potential_productivity(cpu_max: np.ndarray, fg_predicted: np.ndarray, free_memory_mib: np.ndarray,
                           slot_memory_mib: int) -> np.ndarray:
    """P per node in cores: Eq. 1 of RHIC, with slots = backfill VMs that fit in free memory."""
    slots = np.floor_divide(np.maximum(free_memory_mib, 0), max(slot_memory_mib, 1))
    return np.maximum(np.minimum(cpu_max - fg_predicted, 1.0 * slots), 0.0)


def node_potential_productivity(cpu_max: float, fg_predicted: float, free_memory_mib: float,
                                slot_memory_mib: int) -> float:
    """potential_productivity for one node in plain floats: the same IEEE operations in the same
    order, so the same value to the last bit (tests/unit/test_fast_paths.py checks it)."""
    slots = _maximum(free_memory_mib, 0.0) // max(slot_memory_mib, 1)
    return _maximum(_minimum(cpu_max - fg_predicted, 1.0 * slots), 0.0)


def _maximum(a: float, b: float) -> float:
    """np.maximum of two floats: NaN if either is, else b on a tie (0.0 and -0.0); max() keeps a."""
    return a if a > b or a != a else b


def _minimum(a: float, b: float) -> float:
    """np.minimum of two floats (as _maximum)."""
    return a if a < b or a != a else b


@plain_init
@dataclass(frozen=True)
class Selection:
    chosen: tuple[str, ...]        # best first
    swaps: tuple[tuple[str, str], ...] = ()   # (dropped, added)
    deferred: bool = False


def select_volunteers(node_ids: list[str], productivity: np.ndarray, previous: tuple[str, ...],
                      count: int, threshold: float, churn_deferred: bool = False) -> Selection:
    """Choose up to `count` nodes with P > 0.

    Nodes already chosen stay unless an unused node beats the worst of them by more than
    `threshold` cores; new slots go to the best unused nodes. With `churn_deferred`, the previous
    choice stands (less any node that is gone) until the evaluation interval ends.
    """
    if count >= len(node_ids) and not churn_deferred:
        return Selection(tuple(_all_best_first(node_ids, productivity)))
    index = {node: i for i, node in enumerate(node_ids)}
    p = productivity.tolist()   # plain floats: reading numpy scalars one by one is slow
    kept = [node for node in previous if node in index and p[index[node]] > 0]
    if churn_deferred:
        return Selection(tuple(_best_first(kept, p, index)), deferred=True)
    kept = _best_first(kept, p, index)[:max(count, 0)]
    used = np.zeros(len(node_ids), dtype=bool)
    used[[index[n] for n in kept]] = True
    candidates = _unused_by_p(productivity, used)
    added = [node_ids[i] for i in candidates[:max(count - len(kept), 0)]]
    used[[index[n] for n in added]] = True
    chosen = kept + added
    swaps = []
    remaining = _unused_by_p(productivity, used)
    for best in remaining:  # best unused first, against the worst used
        if not chosen:
            break
        worst = min(chosen, key=lambda n: (p[index[n]], n))
        if p[best] - p[index[worst]] <= threshold:
            break
        chosen[chosen.index(worst)] = node_ids[best]
        swaps.append((worst, node_ids[best]))
    return Selection(tuple(_best_first(chosen, p, index)), tuple(swaps))


def _all_best_first(node_ids: list[str], productivity: np.ndarray) -> list[str]:
    """Every node with P > 0, best first (ties by node id): the choice whenever there is room for
    all of them, whatever was chosen before (all are kept or added, none is left to swap in)."""
    positive = np.flatnonzero(productivity > 0)
    order = np.lexsort((_name_ranks(tuple(node_ids))[positive], -productivity[positive]))
    return [node_ids[i] for i in positive[order].tolist()]


@lru_cache(maxsize=4)
def _name_ranks(node_ids: tuple[str, ...]) -> np.ndarray:
    """Each id's rank in sorted order (a pool's ids rarely change between passes: kept)."""
    ranks = np.empty(len(node_ids), dtype=np.int64)
    ranks[sorted(range(len(node_ids)), key=node_ids.__getitem__)] = np.arange(len(node_ids))
    ranks.flags.writeable = False
    return ranks


def _unused_by_p(productivity: np.ndarray, used: np.ndarray) -> np.ndarray:
    """Indices of unused nodes with P > 0, highest P first (ties by position)."""
    free = np.flatnonzero(~used & (productivity > 0))
    return free[np.argsort(-productivity[free], kind="stable")]


def _best_first(nodes: list[str], productivity: list[float], index: dict[str, int]) -> list[str]:
    """Highest P first, ties by node id: sorted by id, then (stably) by P."""
    ordered = sorted(nodes)
    ordered.sort(key=lambda n: -productivity[index[n]])
    return ordered


class BestFirst:
    """Every node with P > 0, best first (ties by node id): _all_best_first's answer, kept from
    pass to pass by moving only the nodes whose P changed, rather than sorting every node afresh.
    The ids are rows (the same list from pass to pass while the nodes stay the same; any other
    list starts afresh)."""

    def __init__(self) -> None:
        self._ids: list[str] | None = None
        self._p = np.zeros(0)
        self._keys: list[tuple[float, str]] = []   # (-P, id) of the chosen, sorted
        self._chosen: list[str] = []               # their ids, in the same order
        self._answer: tuple[str, ...] = ()

    def update(self, node_ids: list[str], productivity: np.ndarray,
               moved: tuple[np.ndarray, list[int]] | None = None) -> tuple[str, ...]:
        """`moved`, if known: (an array, the rows where `productivity` differs from it); used when
        that array is the last call's, rather than comparing every row."""
        if node_ids is not self._ids or len(productivity) != len(self._p):
            self._ids, self._p = node_ids, productivity
            self._chosen = _all_best_first(node_ids, productivity)
            p = productivity.tolist()
            index = {node: i for i, node in enumerate(node_ids)}
            self._keys = [(-p[index[n]], n) for n in self._chosen]
            self._answer = tuple(self._chosen)
            return self._answer
        if productivity is self._p:
            return self._answer   # the very P of the last call (an array given here is never written to)
        if moved is not None and moved[0] is self._p:
            changed = moved[1]
            old, new = [self._p.item(i) for i in changed], [productivity.item(i) for i in changed]
        else:
            changed = rows_where(productivity != self._p).tolist()
            old, new = self._p[changed].tolist(), productivity[changed].tolist()
        if changed:
            keys, chosen = self._keys, self._chosen
            for i, before, after in zip(changed, old, new):
                node = node_ids[i]
                if before > 0:
                    at = bisect_left(keys, (-before, node))
                    del keys[at], chosen[at]
                if after > 0:
                    at = bisect_left(keys, (-after, node))
                    keys.insert(at, (-after, node))
                    chosen.insert(at, node)
            self._answer = tuple(chosen)
        self._p = productivity
        return self._answer
