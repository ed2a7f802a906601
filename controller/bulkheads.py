"""Bulkheads for the controller's calls to node agents: one slow or hung node never delays another.

Every agent call runs on a bounded pool of threads (`total`, pool-wide), through two lanes per node:

- the urgent lane: stops and on-demand launches. Never refused, served before any backfill call
  (of its node and of the pool), and one of each node's slots is kept for it;
- the backfill lane: backfill launches. At most `per_node - 1` of them run at once on one node,
  and at most `total - per_node` in the whole pool (so urgent calls always find threads), and a
  node holds at most `backlog` of them queued or running. A node whose lane is full is busy:
  the launcher plans nothing on it (controller.core.filling.LaneRoom) until it drains, and a
  backfill call submitted for it anyway is refused (NodeBusy).

At most `per_node` calls run at once on one node, whatever their lane, so a hung node holds at
most that many threads (until the agent timeout ends each call), and the others keep the rest.
Among nodes with calls waiting, threads are given in turn (round robin): a node with a long
backlog does not go ahead of one with a single call. This is Kubernetes' API priority and
fairness in small: two priority levels, each node a flow with a bounded queue.
"""
from __future__ import annotations

import enum
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from gleaner_common.logs import log_event

from .core.filling import LaneRoom

log = logging.getLogger(__name__)


class Lane(enum.Enum):
    URGENT = "urgent"       # stops and on-demand launches: never refused, served first
    BACKFILL = "backfill"   # backfill launches: a bounded backlog per node


class NodeBusy(RuntimeError):
    """The node's backfill lane is full: the call was not queued (it is the launcher's to back off)."""


@dataclass
class _Node:
    urgent: deque = field(default_factory=deque)     # (future, fn, args) waiting
    backfill: deque = field(default_factory=deque)
    running: int = 0              # calls of either lane running now
    running_backfill: int = 0
    full_since: float | None = None   # when the backfill lane last filled up (None: not full)
    refused: int = 0              # backfill calls refused since it filled up

    @property
    def backfill_used(self) -> int:
        return len(self.backfill) + self.running_backfill

    @property
    def idle(self) -> bool:
        return not self.running and not self.urgent and not self.backfill


class Bulkheads:
    """Agent calls, per node and per lane, on at most `max_workers` threads (see the module's doc)."""

    def __init__(self, max_workers: int = 32, per_node: int | None = None, backlog: int = 16,
                 on_drained: Callable[[str], None] | None = None, name: str = "agent-call") -> None:
        per_node = min(4, max_workers // 2) if per_node is None else per_node
        if not 2 <= per_node < max_workers:
            raise ValueError(f"per_node must be within 2..max_workers-1 ({max_workers - 1}), not {per_node}: one "
                             "slot per node is kept for stops and on-demand launches, and one node must never "
                             "take every thread")
        if backlog < 1:
            raise ValueError(f"backlog must be 1 or more, not {backlog}")
        self.total, self.per_node, self.backlog = max_workers, per_node, backlog
        self.backfill_total = max_workers - per_node   # the rest is kept for urgent calls
        self.on_drained = on_drained or (lambda _node: None)
        self._name = name
        self._cond = threading.Condition(threading.Lock())
        self._nodes: dict[str, _Node] = {}
        # nodes with calls waiting in that lane, in turn: the one served last goes to the back
        self._rings: dict[Lane, OrderedDict[str, None]] = {Lane.URGENT: OrderedDict(), Lane.BACKFILL: OrderedDict()}
        self._queued = 0
        self._backfill_running = 0
        self._threads: list[threading.Thread] = []
        self._idle_threads = 0
        self._shutdown = False

    # -- submitting -------------------------------------------------------------------------------

    def submit(self, node_id: str, lane: Lane, fn: Callable[..., Any], *args: Any) -> Future:
        """Queue fn(*args) in the node's lane; its Future. NodeBusy: a backfill call for a node
        whose backfill lane is full. RuntimeError: shut down."""
        future: Future = Future()
        with self._cond:
            if self._shutdown:
                raise RuntimeError("cannot queue agent calls after shutdown")
            node = self._nodes.setdefault(node_id, _Node())
            if lane is Lane.BACKFILL and node.backfill_used >= self.backlog:
                node.refused += 1
                self._log_refused(node_id, node)
                raise NodeBusy(f"node {node_id}'s backfill lane is full ({node.running_backfill} running, "
                               f"{len(node.backfill)} queued, backlog {self.backlog})")
            (node.urgent if lane is Lane.URGENT else node.backfill).append((future, fn, args))
            self._rings[lane][node_id] = None
            self._queued += 1
            if lane is Lane.BACKFILL and node.backfill_used >= self.backlog and node.full_since is None:
                node.full_since = time.monotonic()
                log_event(log, "agent.backfill_lane_full", logging.WARNING, node=node_id,
                          backfill_running=node.running_backfill, backfill_queued=len(node.backfill),
                          urgent_queued=len(node.urgent), backlog=self.backlog,
                          effect="no backfill is planned on this node until its lane drains")
            if self._queued > self._idle_threads and len(self._threads) < self.total:   # (woken or not yet)
                self._start_thread()
            self._cond.notify_all()
        return future

    def _log_refused(self, node_id: str, node: _Node) -> None:
        log_event(log, "agent.backfill_refused", logging.WARNING, node=node_id, refused=node.refused,
                  backfill_running=node.running_backfill, backfill_queued=len(node.backfill), backlog=self.backlog)

    def _start_thread(self) -> None:
        # daemon: a call hung on an agent must not keep a stopping controller alive until it times out
        thread = threading.Thread(target=self._work, name=f"{self._name}-{len(self._threads)}", daemon=True)
        self._threads.append(thread)
        thread.start()

    # -- what the launcher reads ------------------------------------------------------------------

    def lane_room(self) -> LaneRoom:
        """The backfill launches each node's lane still takes (nodes with none in it: `backlog`)."""
        with self._cond:
            used = {n: node.backfill_used for n, node in self._nodes.items() if node.backfill_used}
        return LaneRoom(self.backlog, used)

    def busy_nodes(self) -> frozenset[str]:
        """Nodes whose backfill lane is full."""
        return self.lane_room().busy

    # -- the workers ------------------------------------------------------------------------------

    def _take(self) -> tuple[str, Lane, tuple] | None:
        """The next call a free thread may run, under the lock: urgent first, each lane's nodes in turn."""
        ring = self._rings[Lane.URGENT]
        for node_id in ring:
            node = self._nodes[node_id]
            if node.running < self.per_node:
                return node_id, Lane.URGENT, self._pop(node_id, node, node.urgent, ring)
        if self._backfill_running >= self.backfill_total:
            return None
        ring = self._rings[Lane.BACKFILL]
        for node_id in ring:
            node = self._nodes[node_id]
            if node.running < self.per_node and node.running_backfill < self.per_node - 1:
                node.running_backfill += 1
                self._backfill_running += 1
                return node_id, Lane.BACKFILL, self._pop(node_id, node, node.backfill, ring)
        return None

    def _pop(self, node_id: str, node: _Node, queue: deque, ring: OrderedDict) -> tuple:
        item = queue.popleft()
        if queue:
            ring.move_to_end(node_id)   # its turn is over: the others' calls go next
        else:
            del ring[node_id]
        node.running += 1
        self._queued -= 1
        return item

    def _work(self) -> None:
        while True:
            with self._cond:
                taken = self._take()
                while taken is None:
                    if self._shutdown and self._queued == 0:
                        return
                    self._idle_threads += 1
                    self._cond.wait()
                    self._idle_threads -= 1
                    taken = self._take()
            node_id, lane, (future, fn, args) = taken
            self._run(node_id, lane, future, fn, args)

    def _run(self, node_id: str, lane: Lane, future: Future, fn: Callable[..., Any], args: tuple) -> None:
        """One call; whatever it raises goes to its Future (and the log), never out of the worker."""
        result, error = None, None
        if future.set_running_or_notify_cancel():
            try:
                result = fn(*args)
            except BaseException as exc:   # noqa: BLE001 - a call's failure is its Future's, not the worker's
                error = exc
                log_event(log, "agent.call_raised", logging.ERROR, node=node_id, lane=lane.value, error=repr(exc))
        drained = self._finished(node_id, lane)
        if error is not None:
            future.set_exception(error)
        elif not future.cancelled():
            future.set_result(result)
        if drained:
            try:
                self.on_drained(node_id)
            except Exception as exc:   # noqa: BLE001 - the launcher's trouble, not this worker's
                log_event(log, "agent.drained_hook_failed", logging.ERROR, node=node_id, error=repr(exc))

    def _finished(self, node_id: str, lane: Lane) -> bool:
        """Free the call's slots; whether this drained the node's full backfill lane."""
        with self._cond:
            node = self._nodes[node_id]
            node.running -= 1
            if lane is Lane.BACKFILL:
                node.running_backfill -= 1
                self._backfill_running -= 1
            drained = node.full_since is not None and node.backfill_used < self.backlog
            if drained:
                log_event(log, "agent.backfill_lane_drained", node=node_id, refused=node.refused,
                          full_seconds=round(time.monotonic() - node.full_since, 3),
                          backfill_running=node.running_backfill, backfill_queued=len(node.backfill))
                node.full_since, node.refused = None, 0
            if node.idle and node.full_since is None:
                del self._nodes[node_id]   # bounded by the nodes with calls, not every node ever seen
            self._cond.notify_all()
        return drained

    # -- stopping ---------------------------------------------------------------------------------

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        """No new calls; the queued ones still run unless `cancel_futures` (then they are cancelled,
        their Futures' callbacks run). `wait`: return once every call has ended."""
        cancelled: list[Future] = []
        with self._cond:
            self._shutdown = True
            if cancel_futures:
                for node_id, node in list(self._nodes.items()):
                    for queue in (node.urgent, node.backfill):
                        cancelled += [future for future, _fn, _args in queue]
                        self._queued -= len(queue)
                        queue.clear()
                    if node.idle:
                        del self._nodes[node_id]
                for ring in self._rings.values():
                    ring.clear()
            self._cond.notify_all()
            threads = list(self._threads)
        for future in cancelled:
            future.cancel()
        if wait:
            me = threading.current_thread()
            for thread in threads:
                if thread is not me:
                    thread.join()
