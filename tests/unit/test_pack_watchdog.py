"""gleaner_common/watchdog.py in-process: sd_notify by hand and when the pings are withheld.
(tests/integration/test_pack_watchdog.py checks the real daemons.)"""
from __future__ import annotations

import importlib
import socket
import threading
import time
import uuid

import pytest

from gleaner_common import watchdog as shipped


@pytest.fixture
def wd(monkeypatch):
    """A fresh copy of the module (its loops' books start empty), allowing 0.3 s."""
    monkeypatch.setenv("GLEANER_WATCHDOG_ALLOWED_S", "0.3")
    monkeypatch.delenv("GLEANER_WATCHDOG_HANG", raising=False)
    yield importlib.reload(shipped)
    monkeypatch.delenv("GLEANER_WATCHDOG_ALLOWED_S")
    importlib.reload(shipped)


def test_notify_reaches_an_abstract_socket(wd, monkeypatch):
    name = f"gleaner-test-{uuid.uuid4().hex[:8]}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(2)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        assert wd.notify("READY=1") is True
        assert sock.recv(100) == b"READY=1"


def test_notify_reaches_a_path_socket(wd, monkeypatch, tmp_path):
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(tmp_path / "notify"))
        sock.settimeout(2)
        monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify"))
        assert wd.notify("WATCHDOG=1") is True
        assert sock.recv(100) == b"WATCHDOG=1"


def test_without_notify_socket_nothing_is_sent(wd, monkeypatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert wd.notify("READY=1") is False
    wd.ready()   # no socket, no WATCHDOG_USEC: no thread either
    assert wd._started is False


def test_a_loop_counts_from_its_first_beat_and_is_late_after_the_allowed_interval(wd):
    assert wd.overdue() == []                  # nothing registered: a part switched off is not waited for
    wd.beat("guard")
    now = time.monotonic()
    assert wd.overdue(now + 0.2) == []
    assert wd.overdue(now + 0.5) == ["guard"]
    wd.beat("reporter", every=60)              # its own pace: late only after 60 s more
    assert wd.overdue(time.monotonic() + 30) == ["guard"]


def test_beating_beats_after_a_failing_run_too(wd):
    def broken() -> None:
        raise ValueError("one bad run")
    with pytest.raises(ValueError):
        wd.beating(broken, "scheduler")()
    assert "scheduler" in wd._last


def test_a_watched_item_is_late_only_while_in_hand(wd):
    items = wd.watched(iter(["r1", "r2"]), "intake")
    assert next(items) == "r1"                 # in hand
    assert wd.overdue(time.monotonic() + 1) == ["intake"]
    assert next(items) == "r2"
    assert list(items) == []                   # done, waiting for more: idle, not hung
    assert wd.overdue(time.monotonic() + 1) == []


def test_the_test_only_hang_freezes_the_nth_beat(monkeypatch):
    monkeypatch.setenv("GLEANER_WATCHDOG_HANG", "guard:2")
    wd = importlib.reload(shipped)
    try:
        wd.beat("guard")
        frozen = threading.Thread(target=wd.beat, args=("guard",), daemon=True)
        frozen.start()
        frozen.join(0.5)
        assert frozen.is_alive()               # stuck at its second beat, as a hung loop would be
        wd.beat("reporter")                    # other loops are not affected
    finally:
        monkeypatch.delenv("GLEANER_WATCHDOG_HANG")
        importlib.reload(shipped)
