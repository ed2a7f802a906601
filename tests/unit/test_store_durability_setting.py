"""The controller store's durability setting, pinned (issue 23, item 14): docs/controller.md
promises that a decision written is a decision kept "even across a power cut", which holds only
with synchronous=FULL on every connection that commits, in WAL mode. PRAGMA synchronous is a
per-connection setting that SQLite never stores in the file, so it is read back from each
connection the real Store opened, after real writes and reads."""
from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from controller.core.records import Audit, Lease, Write
from controller.store import Store

FULL = 2   # what PRAGMA synchronous reads for FULL (OFF 0, NORMAL 1, EXTRA 3)


@pytest.fixture
def opened(monkeypatch) -> list[sqlite3.Connection]:
    """Every connection sqlite3.connect makes while the test runs (real connections, only listed)."""
    made: list[sqlite3.Connection] = []
    real_connect = sqlite3.connect

    def listed(*args, **kwargs):
        conn = real_connect(*args, **kwargs)
        made.append(conn)
        return conn
    monkeypatch.setattr(sqlite3, "connect", listed)
    return made


def use(store: Store, i: int) -> None:
    """A commit and the reads the controller makes, so that any connection opened for them exists."""
    now = time.time()
    lease = Lease(f"od-{i}", "on_demand", "n1", f"vm-od-{i}", 1, 128, "tiny", "admin", "starting", now,
                  deadline=now + 60)
    store.apply(Write(created=(lease,), events=(Audit("request.placed", "n1", lease.lease_id, {}),)))
    store.record("node.up", node_id="n1")
    assert store.lease(lease.lease_id) is not None and store.live_leases()
    store.events(limit=10)
    store.backfill()


def settings_of(conn: sqlite3.Connection) -> tuple[int, str]:
    return conn.execute("PRAGMA synchronous").fetchone()[0], conn.execute("PRAGMA journal_mode").fetchone()[0]


@pytest.mark.parametrize("reopen", [False, True], ids=["new store", "existing store"])
def test_every_store_connection_commits_with_synchronous_full_in_wal(tmp_path: Path, opened, reopen):
    path = tmp_path / "state" / "controller.sqlite3"
    if reopen:   # a store that already has its schema and rows, as after a controller restart
        first = Store(path)
        use(first, 0)
        first.close()
        opened.clear()
    store = Store(path, exclusive=True)   # as controller/cli.py opens it
    try:
        use(store, 1)
        assert opened, "the store opened no connection through sqlite3.connect: this test sees nothing"
        for conn in opened:
            synchronous, journal = settings_of(conn)
            assert synchronous == FULL, (f"a store connection commits with PRAGMA synchronous={synchronous}, "
                                         f"not FULL ({FULL}): a power cut may lose a decision already acted on")
            assert journal == "wal", f"a store connection is in journal_mode={journal}, not WAL"
    finally:
        store.close()


def test_the_store_file_itself_is_in_wal_mode(tmp_path: Path):
    """WAL, unlike synchronous, is recorded in the file: any later reader (gleanctl, a backup) sees it."""
    path = tmp_path / "controller.sqlite3"
    store = Store(path)
    use(store, 0)
    store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
