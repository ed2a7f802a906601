"""Volunteer selection (RHIC): each node's potential productivity P from its predicted
foreground demand and the volunteer slots its memory holds, the greedy choice and the swaps.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .records import (Audit, Effect, Write)
from .selection import BestFirst, Selection, node_potential_productivity, potential_productivity, select_volunteers
from .selection_rows import RowValues, SelectionRows


class VolunteerSelection:
    """Stage: volunteer selection (RHIC). Owns its per-node rows, the selection, P and
    the predictions, and the count of nodes that came or went."""

    def _init_volunteers(self) -> None:
        self._selection_rows = SelectionRows()   # volunteer selection's inputs, row by row
        self._reported: set[str] = set()         # nodes that reported since the last selection
        self._best_first = BestFirst()           # the selection when every node fits, kept row by row
        self.selected: tuple[str, ...] = ()
        self._selected_by_p = False   # the last selection was every node with P > 0, best first
        self._p_rows: tuple[list[str], int, np.ndarray] | None = None   # the last P, its rows and slot size
        self.productivity: Mapping[str, float] = {}
        self.predicted: Mapping[str, float] = {}
        self.churn = 0   # nodes that came or went since the last evaluation (a burst defers decisions)

    def _node_came_or_went(self) -> None:
        self.churn += 1

    def _node_reported(self, node_id: str) -> None:
        self._reported.add(node_id)

    def select(self, now: float, evaluation: bool) -> list[Effect]:
        """A volunteer-selection pass (RHIC): at the end of an evaluation interval it decides afresh;
        between them, after a burst of node churn, the last choice stands."""
        config = self.backfill
        self._refresh_views()
        rows = self._selection_rows
        touched = rows.update(self.nodes, self._node_views, self._take_rebuilt(), self.settings.prediction_window,
                              now, self._reported)
        self._reported = set()
        ids, predicted = rows.ids, rows.predicted
        p, moved = self._productivity(rows, touched, config.memory_mb)
        self._p_rows = (ids, config.memory_mb, p)
        count = len(ids) if not config.max_instances else min(len(ids), config.max_instances)
        deferred = not evaluation and self.churn > self.settings.churn_burst
        # Room for every node: every node with P > 0, best first (what select_volunteers answers
        # then), kept sorted row by row rather than sorted afresh.
        all_fit = count >= len(ids) and not deferred
        result = Selection(self._best_first.update(ids, p, moved)) if all_fit else \
            select_volunteers(ids, p, self.selected, count, self.settings.swap_threshold_cores, deferred)
        if evaluation:
            self.churn = 0
        self.selected = result.chosen
        self._selected_by_p = all_fit
        self._productivity_changed(ids, p, moved)
        self.productivity = rows.by_node(p)
        if touched is None or touched or not isinstance(self.predicted, RowValues):
            self.predicted = rows.by_node(predicted.copy())   # else the same predictions as the last pass's
        if not result.swaps:
            return []
        return [Write(events=tuple(Audit("selection.swap", added, detail=dict(
            dropped=dropped, added=added, threshold_cores=self.settings.swap_threshold_cores))
            for dropped, added in result.swaps))]

    def _productivity(self, rows: SelectionRows, touched: list[int] | None, slot_memory_mib: int
                      ) -> tuple[np.ndarray, tuple[np.ndarray, list[int]] | None]:
        """P per row: afresh, or the last pass's with the `touched` rows computed again; and, when
        known, (the last P, the rows where this one differs)."""
        ids, predicted, last = rows.ids, rows.predicted, self._p_rows
        if touched is None or last is None or last[0] is not ids or last[1] != slot_memory_mib:
            p = potential_productivity(rows.cpu_max, predicted, rows.free_memory, slot_memory_mib)
            p[rows.excluded] = 0.0
            return p, None
        if not touched:   # no row's inputs changed: the same P (an array no one writes to)
            return last[2], None
        p = last[2].copy()
        if len(touched) > 16:   # many rows: in numpy
            part = potential_productivity(rows.cpu_max[touched], predicted[touched], rows.free_memory[touched],
                                          slot_memory_mib)
            part[rows.excluded[touched]] = 0.0
            p[touched] = part
            return p, None
        # the few rows whose inputs changed, in plain floats
        cpu_max, free_memory, excluded, moved = rows.cpu_max, rows.free_memory, rows.excluded, []
        for i in touched:
            value = 0.0 if excluded[i] else \
                node_potential_productivity(cpu_max.item(i), predicted.item(i), free_memory.item(i), slot_memory_mib)
            p[i] = value
            if value != last[2].item(i):   # as p != last P reads it (NaN differs)
                moved.append(i)
        return p, (last[2], moved)
