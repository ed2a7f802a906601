"""systemd readiness and watchdog notifications (sd_notify), fed by the loops that matter.

The units are Type=notify with WatchdogSec= (deploy/systemd/): systemd starts a daemon's
dependants once it says READY=1, and kills and restarts it when WATCHDOG=1 stops coming. Here:

    ready()                      READY=1 once the daemon serves, and the watchdog thread started
    beat("guard", every)         a periodic loop went round (once per turn; `every`: the seconds
                                 it means to take until its next turn, if that may be long)
    beating(job, "scheduler", every)   job, beating after every run (an APScheduler job)
    watched(iterator, "intake")  an event-driven loop: each item it handles must be done within
                                 the allowed time; waiting for the next item is not hanging

The watchdog thread sends WATCHDOG=1 every half of $WATCHDOG_USEC only while every loop that
has beaten once beat again within its allowed interval (ALLOWED_S plus the `every` of its last
beat) (and no watched item is older than
that): a hung loop stops the pings and systemd restarts the daemon after WatchdogSec. A loop
registers itself with its first beat, so a part switched off by configuration (no controller
address: no reporter) is never waited for.

Without $NOTIFY_SOCKET (not under systemd) every call is a no-op apart from the bookkeeping.
Written by hand (an AF_UNIX datagram to the socket, '@' for the abstract namespace): a few
lines, no library.

Tests only: GLEANER_WATCHDOG_HANG="LOOP[:N],..." makes LOOP's Nth beat (1st by default) block
forever, freezing that loop's thread where it stands, as a real hang would;
GLEANER_WATCHDOG_ALLOWED_S overrides every loop's allowed interval (the tests use a few
seconds rather than ALLOWED_S).
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from gleaner_common.logs import log_event

log = logging.getLogger(__name__)
T = TypeVar("T")

# How long a loop may go without a beat (or a watched item take) before it counts as hung.
# Generous: the guard turns every second at most, the reporter every report (a few seconds) or
# every second while its controller is away, the liveness job every liveness_check_seconds; a
# TCG lab VM is slow. Together with WatchdogSec (30 s) a hung loop is restarted within a minute.
ALLOWED_S = 30.0
HANG_ENV = "GLEANER_WATCHDOG_HANG"
ALLOWED_ENV = "GLEANER_WATCHDOG_ALLOWED_S"


def _hangs(text: str) -> dict[str, int]:
    hangs = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, nth = item.partition(":")
        hangs[name] = int(nth) if nth else 1
    return hangs


_lock = threading.Lock()
_last: dict[str, float] = {}                 # loop -> monotonic time by which it must beat again
_beats: dict[str, int] = {}                  # loop -> beats so far (for the test-only hang)
_busy: dict[object, tuple[str, float]] = {}  # a watched item in hand -> (loop, since)
_hang_at = _hangs(os.environ.get(HANG_ENV, ""))
_allowed = float(os.environ.get(ALLOWED_ENV) or ALLOWED_S)
_started = False


def notify(message: str) -> bool:
    """Send MESSAGE to systemd's $NOTIFY_SOCKET; False when there is none (not under systemd)
    or it cannot be reached (then logged: systemd would time the service out)."""
    address = os.environ.get("NOTIFY_SOCKET", "")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto(message.encode(), address)
        return True
    except OSError as exc:
        log_event(log, "watchdog.notify_failed", logging.WARNING, message=message, error=str(exc))
        return False


def _hang(name: str) -> None:
    log_event(log, "watchdog.hanging", logging.WARNING, loop=name, env=HANG_ENV)
    while True:  # the test-only frozen loop: as stuck as a real deadlock, without spinning
        time.sleep(3600)


def beat(name: str, every: float = 0.0) -> None:
    """Loop NAME went round: it is alive for another allowed interval, plus EVERY seconds (its
    own pace: a reporter configured to report every 60 s is not hung after 30)."""
    with _lock:
        _last[name] = time.monotonic() + _allowed + every
        _beats[name] = count = _beats.get(name, 0) + 1
    if _hang_at.get(name) == count:
        _hang(name)


def beating(job: Callable[[], None], name: str, every: float = 0.0) -> Callable[[], None]:
    """JOB, beating NAME after each run, whether it returned or raised (a failing run is not a
    hung one; its caller logs it)."""
    def run() -> None:
        try:
            job()
        finally:
            beat(name, every)
    return run


def watched(items: Iterable[T], name: str) -> Iterator[T]:
    """ITEMS, each one counted as in hand from when it is given out until the next is asked
    for (or the loop ends): an item in hand longer than the allowed interval means the loop
    hangs; a loop waiting for its next item is idle, not hung."""
    for item in items:
        token = object()
        with _lock:
            _busy[token] = (name, time.monotonic())
            _beats[name] = count = _beats.get(name, 0) + 1
        try:
            if _hang_at.get(name) == count:
                _hang(name)
            yield item
        finally:
            with _lock:
                _busy.pop(token, None)


def overdue(now: float | None = None) -> list[str]:
    """The loops that have not beaten (or whose item in hand is older) than the allowed interval."""
    now = time.monotonic() if now is None else now
    with _lock:
        late = {name for name, due in _last.items() if now > due}
        late |= {name for name, since in _busy.values() if now - since > _allowed}
    return sorted(late)


def _pinger(every: float) -> None:
    said_late: list[str] = []
    while True:
        late = overdue()
        if not late:
            notify("WATCHDOG=1")
        elif late != said_late:  # once per change, not every ping
            log_event(log, "watchdog.withheld", logging.ERROR, hung=",".join(late), allowed_s=_allowed)
        said_late = late
        time.sleep(every)


def ready() -> None:
    """READY=1, and the watchdog thread if systemd asked for one (WatchdogSec: $WATCHDOG_USEC,
    for this process: $WATCHDOG_PID when set)."""
    global _started
    notify("READY=1")
    usec, pid = os.environ.get("WATCHDOG_USEC", ""), os.environ.get("WATCHDOG_PID", "")
    if _started or not usec.isdigit() or int(usec) <= 0 or (pid and pid != str(os.getpid())):
        return
    _started = True
    every = int(usec) / 2e6   # half of WatchdogSec, as sd_watchdog_enabled(3) advises
    threading.Thread(target=_pinger, args=(every,), name="watchdog", daemon=True).start()
    log_event(log, "watchdog.started", ping_s=round(every, 3), allowed_s=_allowed)
