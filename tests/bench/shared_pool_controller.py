"""The controller as it dispatched agent calls before the bulkheads, for comparison in benchmarks:

    python -m tests.bench.shared_pool_controller --config FILE

The real controller (controller.cli), except that every agent call goes to one shared pool of
32 threads with one unbounded queue, whatever its node and kind, and the launcher plans as if
every node's lane had room: the dispatch of the commit before controller/bulkheads.py. (A
launch whose lease ended while it waited is still skipped, as now.) Never for production.
"""
from __future__ import annotations

import sys
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

from controller import cli, service
from controller.core.filling import LaneRoom


class SharedPool:
    """The old dispatch behind the bulkheads' interface: one ThreadPoolExecutor(32)."""

    def __init__(self, max_workers: int = 32, *_args: Any, **_kw: Any) -> None:
        self.pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="agent-call")

    def submit(self, _node_id: str, _lane: Any, fn: Callable[..., Any], *args: Any) -> Future:
        return self.pool.submit(fn, *args)

    def lane_room(self) -> LaneRoom:
        return LaneRoom()

    def busy_nodes(self) -> frozenset[str]:
        return frozenset()

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        self.pool.shutdown(wait=wait, cancel_futures=cancel_futures)


def use_shared_pool() -> None:
    """From now on, every PoolService dispatches through one SharedPool of 32 threads."""
    service.Bulkheads = lambda *_args, **_kw: SharedPool(32)   # type: ignore[assignment]


if __name__ == "__main__":
    use_shared_pool()
    sys.exit(cli.main())
