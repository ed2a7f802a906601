"""The controller's durable state in SQLite: leases, on-demand requests, the backfill
configuration, reserves and the audit log.

WAL journaling lets readers (gleanctl) work while the controller writes. The schema carries a
version in `PRAGMA user_version`; MIGRATIONS[i] takes version i to i + 1, so an older store is
brought forward on open and a newer one (from a later controller) is refused, not damaged.
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .core.policy import BackfillConfig

MIGRATIONS: list[str] = [
    # 0 -> 1: the first schema
    """
    CREATE TABLE leases (
        lease_id    TEXT PRIMARY KEY,
        role        TEXT NOT NULL CHECK (role IN ('on_demand', 'backfill')),
        node_id     TEXT NOT NULL,
        vm_name     TEXT NOT NULL UNIQUE,
        vcpus       INTEGER NOT NULL CHECK (vcpus > 0),
        memory_mib  INTEGER NOT NULL CHECK (memory_mib > 0),
        image       TEXT NOT NULL,
        owner       TEXT NOT NULL,
        state       TEXT NOT NULL,
        created_at  REAL NOT NULL,
        launched_at REAL,
        ended_at    REAL,
        end_reason  TEXT NOT NULL DEFAULT ''
    );
    CREATE INDEX leases_live ON leases (state) WHERE ended_at IS NULL;
    CREATE TABLE requests (
        request_id  TEXT PRIMARY KEY,
        vcpus       INTEGER NOT NULL,
        memory_mib  INTEGER NOT NULL,
        image       TEXT NOT NULL,
        owner       TEXT NOT NULL,
        outcome     TEXT NOT NULL,
        lease_id    TEXT,
        node_id     TEXT NOT NULL DEFAULT '',
        victims     TEXT NOT NULL DEFAULT '[]',
        reason      TEXT NOT NULL DEFAULT '',
        created_at  REAL NOT NULL,
        decided_ms  REAL NOT NULL DEFAULT 0
    );
    CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE reserves (
        node_id     TEXT PRIMARY KEY,           -- '*' applies to every node
        vcpus       INTEGER NOT NULL DEFAULT 0 CHECK (vcpus >= 0),
        memory_mib  INTEGER NOT NULL DEFAULT 0 CHECK (memory_mib >= 0),
        whole_node  INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE events (
        seq         INTEGER PRIMARY KEY AUTOINCREMENT,
        at          REAL NOT NULL,
        kind        TEXT NOT NULL,
        node_id     TEXT NOT NULL DEFAULT '',
        lease_id    TEXT NOT NULL DEFAULT '',
        detail      TEXT NOT NULL DEFAULT '{}'
    );
    CREATE INDEX events_kind ON events (kind);
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)


class StoreError(RuntimeError):
    pass


class LeaseConflict(StoreError):
    """A lease would collide with another lease's id or VM name; nothing was written."""


@dataclass(frozen=True)
class Lease:
    lease_id: str
    role: str
    node_id: str
    vm_name: str
    vcpus: int
    memory_mib: int
    image: str
    owner: str
    state: str
    created_at: float
    launched_at: float | None = None
    ended_at: float | None = None
    end_reason: str = ""


@dataclass(frozen=True)
class RequestRecord:
    request_id: str
    vcpus: int
    memory_mib: int
    image: str
    owner: str
    outcome: str                 # pending | placed | rejected | failed
    lease_id: str | None
    node_id: str
    victims: tuple[str, ...]
    reason: str
    created_at: float
    decided_ms: float


@dataclass(frozen=True)
class Reserve:
    node_id: str                 # '*' for every node
    vcpus: int = 0
    memory_mib: int = 0
    whole_node: bool = False


@dataclass(frozen=True)
class AuditEvent:
    seq: int
    at: float
    kind: str
    node_id: str
    lease_id: str
    detail: dict[str, Any]


class Store:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.parent.chmod(0o700)   # leases, owners and the audit log are for root only
        if not path.exists():      # SQLite gives its -wal and -shm files the database file's mode
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        path.chmod(0o600)
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")   # WAL keeps it consistent; a power cut may lose the last commit
        self._db.execute("PRAGMA busy_timeout=5000")
        self._migrate()

    def _migrate(self) -> None:
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(f"{self.path} has schema version {version}, newer than this controller's "
                             f"{SCHEMA_VERSION}; run a newer controller or restore an older backup")
        for step in range(version, SCHEMA_VERSION):
            with self._lock:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    for statement in MIGRATIONS[step].split(";"):
                        if statement.strip():
                            self._db.execute(statement)
                    self._db.execute(f"PRAGMA user_version = {step + 1}")
                    self._db.execute("COMMIT")
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise

    @property
    def schema_version(self) -> int:
        return self._db.execute("PRAGMA user_version").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _write(self, sql: str, args: tuple = ()) -> None:
        with self._lock:
            self._db.execute(sql, args)

    def _rows(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # -- leases -----------------------------------------------------------------------------------

    def put_lease(self, lease: Lease) -> None:
        self.put_leases([lease])

    def put_leases(self, leases: list[Lease]) -> None:
        """Insert leases, or update them by lease id, in one transaction. A VM name that another
        lease holds is a LeaseConflict (never a silent replacement of that lease's row)."""
        names = ", ".join(Lease.__dataclass_fields__)
        marks = ", ".join("?" for _ in Lease.__dataclass_fields__)
        updates = ", ".join(f"{n} = excluded.{n}" for n in Lease.__dataclass_fields__ if n != "lease_id")
        self._insert(f"INSERT INTO leases ({names}) VALUES ({marks}) ON CONFLICT (lease_id) DO UPDATE SET {updates}",
                     leases)

    def insert_lease(self, lease: Lease) -> None:
        """A new lease; a lease id or VM name already in the store is a LeaseConflict."""
        names = ", ".join(Lease.__dataclass_fields__)
        marks = ", ".join("?" for _ in Lease.__dataclass_fields__)
        self._insert(f"INSERT INTO leases ({names}) VALUES ({marks})", [lease])

    def _insert(self, sql: str, leases: list[Lease]) -> None:
        rows = [tuple(asdict(lease).values()) for lease in leases]
        with self._lock:
            try:
                with self._db:  # one transaction
                    self._db.execute("BEGIN")
                    self._db.executemany(sql, rows)
            except sqlite3.IntegrityError as exc:
                if "UNIQUE" in str(exc):
                    raise LeaseConflict(f"another lease already holds that lease id or VM name ({exc})") from None
                raise StoreError(f"the store refused a lease: {exc}") from None

    def live_leases(self) -> list[Lease]:
        return [Lease(**dict(r)) for r in self._rows("SELECT * FROM leases WHERE ended_at IS NULL")]

    def all_leases(self, limit: int = 1000) -> list[Lease]:
        rows = self._rows("SELECT * FROM leases ORDER BY created_at DESC LIMIT ?", (limit,))
        return [Lease(**dict(r)) for r in reversed(rows)]

    def lease(self, lease_id: str) -> Lease | None:
        rows = self._rows("SELECT * FROM leases WHERE lease_id = ?", (lease_id,))
        return Lease(**dict(rows[0])) if rows else None

    # -- requests ---------------------------------------------------------------------------------

    def put_request(self, record: RequestRecord) -> None:
        fields = asdict(record)
        fields["victims"] = json.dumps(list(record.victims))
        names = ", ".join(fields)
        marks = ", ".join("?" for _ in fields)
        self._write(f"INSERT OR REPLACE INTO requests ({names}) VALUES ({marks})", tuple(fields.values()))

    def request(self, request_id: str) -> RequestRecord | None:
        rows = self._rows("SELECT * FROM requests WHERE request_id = ?", (request_id,))
        if not rows:
            return None
        values = dict(rows[0])
        values["victims"] = tuple(json.loads(values["victims"]))
        return RequestRecord(**values)

    # -- backfill configuration and reserves --------------------------------------------------------

    def backfill(self) -> BackfillConfig:
        rows = self._rows("SELECT value FROM settings WHERE key = 'backfill'")
        if not rows:
            return BackfillConfig()
        return BackfillConfig.from_dict(json.loads(rows[0]["value"]))

    def set_backfill(self, config: BackfillConfig) -> None:
        self._write("INSERT OR REPLACE INTO settings (key, value) VALUES ('backfill', ?)",
                    (json.dumps(config.as_dict()),))

    def reserves(self) -> dict[str, Reserve]:
        return {r["node_id"]: Reserve(r["node_id"], r["vcpus"], r["memory_mib"], bool(r["whole_node"]))
                for r in self._rows("SELECT * FROM reserves")}

    def set_reserve(self, reserve: Reserve) -> None:
        if reserve == Reserve(reserve.node_id):
            self._write("DELETE FROM reserves WHERE node_id = ?", (reserve.node_id,))
            return
        self._write("INSERT OR REPLACE INTO reserves (node_id, vcpus, memory_mib, whole_node) VALUES (?, ?, ?, ?)",
                    (reserve.node_id, reserve.vcpus, reserve.memory_mib, int(reserve.whole_node)))

    # -- audit log --------------------------------------------------------------------------------

    def record(self, kind: str, node_id: str = "", lease_id: str = "", at: float | None = None,
               **detail: Any) -> None:
        self._write("INSERT INTO events (at, kind, node_id, lease_id, detail) VALUES (?, ?, ?, ?, ?)",
                    (time.time() if at is None else at, kind, node_id, lease_id, json.dumps(detail, default=str)))

    def count_events(self, kind: str) -> int:
        return self._rows("SELECT COUNT(*) AS n FROM events WHERE kind = ?", (kind,))[0]["n"]

    def events(self, after: int = 0, limit: int = 100, kind: str = "", newest: bool = False) -> list[AuditEvent]:
        """Events with seq > after, oldest first: the first `limit` of them (page on with the last
        seq), or with `newest` the last `limit` of them."""
        sql = "SELECT * FROM events WHERE seq > ?" + (" AND kind = ?" if kind else "") + \
              f" ORDER BY seq {'DESC' if newest else 'ASC'} LIMIT ?"
        args = (after, kind, limit) if kind else (after, limit)
        rows = self._rows(sql, args)
        if newest:
            rows.reverse()
        return [AuditEvent(r["seq"], r["at"], r["kind"], r["node_id"], r["lease_id"], json.loads(r["detail"]))
                for r in rows]
