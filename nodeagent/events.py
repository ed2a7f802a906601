"""In-process event bus: what the agent did on its own, for WatchEvents and the logs."""
from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone

from gleaner_common.logs import log_event


log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Event:
    kind: str       # class.changed, guard.boost, guard.release, drift.corrected, network.limited
    domain: str
    detail: str
    fields: dict[str, str] = field(default_factory=dict)
    time: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    level: int = logging.INFO  # how the log line of the event is logged


class EventBus:
    """Every subscriber gets every event published after it subscribed. A subscriber that
    stops reading loses the oldest events rather than holding the agent back."""

    def __init__(self, backlog: int = 1000) -> None:
        self._subscribers: set[queue.Queue[Event]] = set()
        self._lock = threading.Lock()
        self._backlog = backlog
        self._counts: dict[str, int] = {}   # events published since the start, by kind (a fixed few)

    def publish(self, event: Event) -> None:
        log_event(log, event.kind, event.level, domain=event.domain, detail=event.detail, **event.fields)
        with self._lock:
            self._counts[event.kind] = self._counts.get(event.kind, 0) + 1
            subscribers = list(self._subscribers)
        for q in subscribers:
            while True:
                try:
                    q.put_nowait(event)
                    break
                except queue.Full:
                    try:
                        q.get_nowait()
                    except queue.Empty:
                        pass

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def subscribe(self) -> "queue.Queue[Event]":
        q: queue.Queue[Event] = queue.Queue(self._backlog)
        with self._lock:
            self._subscribers.add(q)
        return q

    def unsubscribe(self, q: "queue.Queue[Event]") -> None:
        with self._lock:
            self._subscribers.discard(q)
