"""The controller's durable state in SQLite: leases, on-demand requests, the backfill
configuration, reserves, tenants and the audit log.

The ledger's Writes land here, each in one transaction (rows and their audit events together),
before the calls they authorise. WAL journaling lets readers (gleanctl) work while the controller
writes; synchronous=FULL makes every commit durable before the controller acts on it (see
DURABILITY). The schema carries a version in `PRAGMA user_version`; MIGRATIONS[i] takes version i
to i + 1, so an older store is brought forward on open and a newer one (from a later controller)
is refused, not damaged. One controller owns a store at a time: a lock on the state directory.
`PRAGMA quick_check` runs on open; a damaged store is reported and left untouched.
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .core.records import GOAL_REQUEST_PREFIX, Audit, BackfillConfig, Lease, RequestRecord, Reserve, TenantRecord, Write
from .core.reserves import DemandHistory
from .core.reserve_settings import MAX_HINTS, Hint

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
    # 1 -> 2: deadlines and the links of the state machines (controller/core/ledger.py)
    """
    ALTER TABLE leases ADD COLUMN deadline REAL;
    ALTER TABLE leases ADD COLUMN request_id TEXT NOT NULL DEFAULT '';
    ALTER TABLE leases ADD COLUMN ending TEXT NOT NULL DEFAULT 'ended';
    ALTER TABLE requests ADD COLUMN path TEXT NOT NULL DEFAULT '';
    CREATE INDEX leases_ended ON leases (ended_at) WHERE ended_at IS NOT NULL;
    CREATE INDEX requests_pending ON requests (outcome) WHERE outcome = 'pending';
    """,
    # 2 -> 3: a queued request's own deadline (a wait for backfill in transit may outlast W)
    """
    ALTER TABLE requests ADD COLUMN wait_until REAL;
    """,
    # 3 -> 4: retention finds what is old without reading the tables through
    """
    CREATE INDEX events_at ON events (at);
    CREATE INDEX requests_resolved ON requests (created_at) WHERE outcome != 'pending';
    """,
    # 4 -> 5: hibernation (issue 25): a lease's time asleep, and when its current sleep began
    """
    ALTER TABLE leases ADD COLUMN slept_seconds REAL NOT NULL DEFAULT 0;
    ALTER TABLE leases ADD COLUMN hibernated_at REAL;
    """,
    # 5 -> 6: tenants (issue 26, PhoenixCloud's bounds). An upper bound of 0,0 is unbounded. The
    # two built-in tenants keep an existing pool working: "default" takes every on-demand owner no
    # tenant is named after, "backfill" owns the pool-wide backfill settings (backfill NULL: the
    # settings' 'backfill' row, gleanctl backfill). Neither may be deleted.
    """
    CREATE TABLE tenants (
        name             TEXT PRIMARY KEY,
        kind             TEXT NOT NULL CHECK (kind IN ('on_demand', 'batch')),
        lower_vcpus      INTEGER NOT NULL DEFAULT 0 CHECK (lower_vcpus >= 0),
        lower_memory_mib INTEGER NOT NULL DEFAULT 0 CHECK (lower_memory_mib >= 0),
        upper_vcpus      INTEGER NOT NULL DEFAULT 0 CHECK (upper_vcpus >= 0),
        upper_memory_mib INTEGER NOT NULL DEFAULT 0 CHECK (upper_memory_mib >= 0),
        created_at       REAL NOT NULL,
        backfill         TEXT,
        goal             TEXT
    );
    INSERT INTO tenants (name, kind, created_at) VALUES
        ('default', 'on_demand', (julianday('now') - 2440587.5) * 86400.0),
        ('backfill', 'batch', (julianday('now') - 2440587.5) * 86400.0);
    """,
]
# Decisions are acted on the moment they are written: a commit must survive a power cut, not
# only a crash of the process (which NORMAL already survives in WAL mode). Measured with
# `python -m tests.bench.store_durability` (a preemption's Write, 900 commits per setting): FULL
# p50 0.50 ms, p99 1.59 ms; NORMAL p50 0.18 ms, p99 4.2 ms. A decision can afford FULL.
DURABILITY = "FULL"
SCHEMA_VERSION = len(MIGRATIONS)


class StoreError(RuntimeError):
    pass


class LeaseConflict(StoreError):
    """A lease would collide with another lease's id or VM name; nothing was written."""

    def __init__(self, message: str, leases: Sequence[Lease] = ()) -> None:
        super().__init__(message)
        self.leases = tuple(leases)   # the new leases that clash


class StoreBusy(StoreError):
    """Another controller owns this store."""


@dataclass(frozen=True)
class AuditEvent:
    seq: int
    at: float
    kind: str
    node_id: str
    lease_id: str
    detail: dict[str, Any]


class Store:
    def __init__(self, path: Path, exclusive: bool = False) -> None:
        """Open (or create) the store. With `exclusive`, take the state directory's lock first:
        a second controller on the same store fails here, before it reads or writes anything."""
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.parent.chmod(0o700)   # leases, owners and the audit log are for root only
        self.path = path
        self._owner = self._take_lock(path.parent / "controller.lock") if exclusive else None
        if not path.exists():      # SQLite gives its -wal and -shm files the database file's mode
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        path.chmod(0o600)
        self._lock = threading.Lock()
        # Who caused the writes of this thread (the service points it at the admin of the call
        # being served): every audit event says so in its detail, as "by".
        self.caller: Callable[[], str] = lambda: ""
        # settings rows of names that were not a JSON list when read (key -> the row, cut short):
        # read as no names; the service warns of them when it loads the books
        self._unreadable: dict[str, str] = {}
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._check_integrity()
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={DURABILITY}")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._migrate()

    @staticmethod
    def _take_lock(lock_path: Path) -> int:
        import fcntl
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise StoreBusy(f"{lock_path.parent} is in use by another controller ({holder}); one controller owns "
                            "a store at a time: stop the other one first") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()}\n".encode())
        return fd

    def _check_integrity(self) -> None:
        try:
            result = [r[0] for r in self._db.execute("PRAGMA quick_check").fetchall()]
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise StoreError(f"{self.path} is not a usable SQLite database ({exc}); it was left untouched: "
                             "restore it from a backup, or move it away to start an empty pool") from None
        if result != ["ok"]:
            self._db.close()
            raise StoreError(f"{self.path} is damaged ({'; '.join(result[:5])}); it was left untouched: restore "
                             "it from a backup, or move it away to start an empty pool")

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
        if self._owner is not None:
            os.close(self._owner)   # releases the lock
            self._owner = None

    @contextmanager
    def _failing(self) -> Iterator[None]:
        """SQLite's own failures (disk full, I/O error, a closed database) as a StoreError that
        names the store, so callers map one exception and admins read where to look."""
        try:
            yield
        except sqlite3.Error as exc:
            raise StoreError(f"the controller's store {self.path} failed: {exc}") from None

    def _write(self, sql: str, args: tuple = ()) -> None:
        with self._failing(), self._lock:
            self._db.execute(sql, args)

    def _rows(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        with self._failing(), self._lock:
            return self._db.execute(sql, args).fetchall()

    # -- leases -----------------------------------------------------------------------------------

    def apply(self, write: Write, at: float | None = None) -> None:
        """One of the ledger's Writes, in one transaction (apply_all)."""
        self.apply_all((write,), at)

    def apply_all(self, writes: Sequence[Write], at: float | None = None) -> None:
        """The ledger's Writes, in order, in one transaction: all of them or none. New leases are a
        plain insert, so a clash of lease id or VM name is a LeaseConflict naming the clashing
        leases, and nothing is written; updated leases, requests, the reserves' hints and nodes,
        and the audit events that explain them."""
        at = time.time() if at is None else at
        with self._failing(), self._lock:
            try:
                with self._db:
                    self._db.execute("BEGIN")
                    for write in writes:
                        self._write_one(write, at)
            except sqlite3.IntegrityError as exc:
                if "UNIQUE" in str(exc):
                    created = [lease for write in writes for lease in write.created]
                    raise LeaseConflict(f"another lease already holds that lease id or VM name ({exc})",
                                        [l for l in created if self._clashes(l)] or created) from None
                raise StoreError(f"the store refused a lease: {exc}") from None

    def _write_one(self, write: Write, at: float) -> None:
        if write.created:
            self._db.executemany(_INSERT_LEASE, [_lease_row(l) for l in write.created])
        if write.updated:
            self._db.executemany(_UPSERT_LEASE, [_lease_row(l) for l in write.updated])
        if write.requests:
            self._db.executemany(_UPSERT_REQUEST, [_request_row(r) for r in write.requests])
        if write.hints is not None:   # in the transaction of the audit event that explains it
            self._db.execute("INSERT OR REPLACE INTO settings (key, value) VALUES ('reserve_hints', ?)",
                             (json.dumps([asdict(h) for h in write.hints]),))
        if write.reserved is not None:
            self._db.execute("INSERT OR REPLACE INTO settings (key, value) VALUES ('reserved_nodes', ?)",
                             (json.dumps(list(write.reserved)),))
        if write.goals_done is not None:   # in the transaction of the stops it explains
            self._set_goals_done(write.goals_done)
        if write.events:
            by = self.caller()
            self._db.executemany(_INSERT_EVENT, [(at, e.kind, e.node_id, e.lease_id,
                                                  _detail(e.detail, by)) for e in write.events])

    def _clashes(self, lease: Lease) -> bool:
        """Whether a stored lease has this lease's id or VM name (under the store's lock)."""
        return self._db.execute("SELECT 1 FROM leases WHERE lease_id = ? OR vm_name = ? LIMIT 1",
                                (lease.lease_id, lease.vm_name)).fetchone() is not None

    def put_lease(self, lease: Lease) -> None:
        self.put_leases([lease])

    def put_leases(self, leases: list[Lease]) -> None:
        """Insert leases, or update them by lease id, in one transaction. A VM name that another
        lease holds is a LeaseConflict (never a silent replacement of that lease's row)."""
        self.apply(Write(updated=tuple(leases)))

    def insert_lease(self, lease: Lease) -> None:
        """A new lease; a lease id or VM name already in the store is a LeaseConflict."""
        self.apply(Write(created=(lease,)))

    def live_leases(self) -> list[Lease]:
        return [Lease(**dict(r)) for r in self._rows("SELECT * FROM leases WHERE ended_at IS NULL")]

    def recently_ended(self, limit: int = 100_000) -> list[Lease]:
        """The leases that ended last: a VM still running under one of them is not adopted."""
        rows = self._rows("SELECT * FROM leases WHERE ended_at IS NOT NULL ORDER BY ended_at DESC LIMIT ?", (limit,))
        return [Lease(**dict(r)) for r in rows]

    def on_demand_lives(self, limit: int) -> list[tuple[float, float]]:
        """(launched_at, ended_at) of the last `limit` on-demand VMs that ended after a launch (not
        goals' dedicated VMs), oldest end first: the departures forecast's lifetimes
        (controller.core.departures). Asked apart from recently_ended, whose window backfill's
        ends may fill."""
        rows = self._rows("SELECT launched_at, ended_at FROM leases WHERE ended_at IS NOT NULL AND role = 'on_demand' "
                          "AND launched_at IS NOT NULL AND substr(request_id, 1, ?) != ? ORDER BY ended_at DESC LIMIT ?",
                          (len(GOAL_REQUEST_PREFIX), GOAL_REQUEST_PREFIX, limit))
        return [(float(r["launched_at"]), float(r["ended_at"])) for r in reversed(rows)]

    def pending_requests(self) -> list[RequestRecord]:
        return [self._request(r) for r in self._rows("SELECT * FROM requests WHERE outcome = 'pending'")]

    def all_leases(self, limit: int = 1000) -> list[Lease]:
        rows = self._rows("SELECT * FROM leases ORDER BY created_at DESC LIMIT ?", (limit,))
        return [Lease(**dict(r)) for r in reversed(rows)]

    def lease(self, lease_id: str) -> Lease | None:
        rows = self._rows("SELECT * FROM leases WHERE lease_id = ?", (lease_id,))
        return Lease(**dict(rows[0])) if rows else None

    # -- requests ---------------------------------------------------------------------------------

    def request(self, request_id: str) -> RequestRecord | None:
        rows = self._rows("SELECT * FROM requests WHERE request_id = ?", (request_id,))
        return self._request(rows[0]) if rows else None

    @staticmethod
    def _request(row: sqlite3.Row) -> RequestRecord:
        values = dict(row)
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

    def reserve_settings(self) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """(the reserve settings in force when last written, the config file's as last read);
        None for what was never written."""
        rows = {r["key"]: json.loads(r["value"]) for r in self._rows(
            "SELECT key, value FROM settings WHERE key IN ('reserve_settings', 'reserve_settings_file')")}
        return rows.get("reserve_settings"), rows.get("reserve_settings_file")

    def set_reserve_settings(self, in_force: dict[str, Any], source: str,
                             from_file: dict[str, Any] | None = None, note: dict[str, Any] | None = None) -> bool:
        """Write the reserve settings in force (and, at a start, the config file's as read), with a
        reserve.configured event naming the source when those in force change; returns whether
        they changed."""
        text = json.dumps(in_force, sort_keys=True)
        before, _file = self.reserve_settings()
        changed = before is None or json.dumps(before, sort_keys=True) != text
        with self._failing(), self._lock, self._db:
            self._db.execute("BEGIN")
            self._db.execute("INSERT OR REPLACE INTO settings (key, value) VALUES ('reserve_settings', ?)", (text,))
            if from_file is not None:
                self._db.execute("INSERT OR REPLACE INTO settings (key, value) VALUES ('reserve_settings_file', ?)",
                                 (json.dumps(from_file, sort_keys=True),))
            if changed:
                self._db.execute(_INSERT_EVENT, (time.time(), "reserve.configured", "", "",
                                                 _detail({**in_force, **(note or {}), "source": source},
                                                         self.caller())))
        return changed

    def reserved_nodes(self) -> list[str]:
        """The nodes the reserves kept free of backfill when last changed."""
        with self._failing(), self._lock:
            return self._names("reserved_nodes")

    def unreadable_settings(self) -> dict[str, str]:
        """The settings rows of names last read as none because they were not a JSON list (key ->
        the row, cut short), for the service to warn of."""
        with self._lock:
            return dict(self._unreadable)

    def _names(self, key: str) -> list[str]:   # under the store's lock
        """A settings row holding a JSON list of names (none, or not such a list: no names)."""
        return [v for v in self._json_setting(key, list, []) if isinstance(v, str)]

    def _json_setting(self, key: str, kind: type, default: Any) -> Any:   # under the store's lock
        """A settings row's JSON value of type `kind`; `default` when there is none, or when it is
        not such JSON (then kept in unreadable_settings for the service to warn of)."""
        row = self._db.execute("SELECT value FROM settings WHERE key = ?", (key,)).fetchone()
        if row is None:
            return default
        try:
            value = json.loads(row["value"])
        except ValueError:
            value = None
        if not isinstance(value, kind):
            self._unreadable[key] = str(row["value"])[:200]
            return default
        self._unreadable.pop(key, None)
        return value

    def hints(self) -> list[Hint]:
        """The reserves' hints as last written (the ledger drops the ones that are over)."""
        rows = self._rows("SELECT value FROM settings WHERE key = 'reserve_hints'")
        values = json.loads(rows[0]["value"]) if rows else []
        return [Hint(int(h["nodes"]), float(h["start_at"]), float(h["until"]), str(h.get("label", "")))
                for h in values[:MAX_HINTS]]

    def history(self) -> DemandHistory | None:
        """The predictive reserve's demand history as last saved, or None (none saved, or saved with
        other slots: it starts afresh)."""
        rows = self._rows("SELECT value FROM settings WHERE key = 'demand_history'")
        if not rows:
            return None
        try:
            return DemandHistory.from_snapshot(json.loads(rows[0]["value"]))
        except (KeyError, TypeError, ValueError):
            return None

    def set_history(self, history: DemandHistory) -> None:
        self._write("INSERT OR REPLACE INTO settings (key, value) VALUES ('demand_history', ?)",
                    (json.dumps(history.snapshot()),))

    def goal_progress(self) -> dict[str, Any] | None:
        """What the guests had said of each goal-driven tenant's job (ProgressBook.snapshot) as last
        saved, or None (none saved, or not a JSON table: the service warns, and the histories start
        afresh)."""
        with self._failing(), self._lock:
            return self._json_setting("goal_progress", dict, None)

    def set_goal_progress(self, snapshot: Mapping[str, Any]) -> None:
        self._write(_SET_GOAL_PROGRESS, (json.dumps(snapshot),))

    # -- tenants ----------------------------------------------------------------------------------

    def tenants(self) -> list[TenantRecord]:
        """Every tenant, by name."""
        return [TenantRecord(**dict(r)) for r in self._rows("SELECT * FROM tenants ORDER BY name")]

    def tenant(self, name: str) -> TenantRecord | None:
        rows = self._rows("SELECT * FROM tenants WHERE name = ?", (name,))
        return TenantRecord(**dict(rows[0])) if rows else None

    def put_tenant(self, tenant: TenantRecord, event: Audit, new: bool, at: float | None = None,
                   job_begins: bool = False, goal_progress: Mapping[str, Any] | None = None) -> None:
        """Insert (`new`: a name already there is a StoreError, nothing written) or update a tenant,
        with its audit event, in one transaction. `job_begins`: its goal was set, so its next job
        begins: a job done before is forgotten in the same transaction, and `goal_progress` (the
        progress book as the books keep it then: GoalSizing.progress_kept) written in it too."""
        values = tuple(asdict(tenant).values())
        sql = _INSERT_TENANT if new else _INSERT_TENANT.replace("INSERT", "INSERT OR REPLACE", 1)

        def change(db: sqlite3.Connection) -> None:
            db.execute(sql, values)
            if job_begins:
                self._forget_goal_done(tenant.name)
            if goal_progress is not None:
                db.execute(_SET_GOAL_PROGRESS, (json.dumps(goal_progress),))
        self._with_event(event, change, at)

    def delete_tenant(self, name: str, event: Audit, at: float | None = None,
                      goal_progress: Mapping[str, Any] | None = None) -> None:
        """Delete a tenant, with its audit event, in one transaction (a job it had done goes too,
        and `goal_progress` is written without it: a tenant made later under its name starts afresh)."""
        def change(db: sqlite3.Connection) -> None:
            db.execute("DELETE FROM tenants WHERE name = ?", (name,))
            self._forget_goal_done(name)
            if goal_progress is not None:
                db.execute(_SET_GOAL_PROGRESS, (json.dumps(goal_progress),))
        self._with_event(event, change, at)

    def goals_done(self) -> list[str]:
        """The tenants whose goal's job was done (Write.goals_done), until their goal is set again."""
        with self._failing(), self._lock:
            return self._names("goals_done")

    def _forget_goal_done(self, name: str) -> None:   # under the store's lock, in a transaction
        self._set_goals_done([n for n in self._names("goals_done") if n != name])

    def _set_goals_done(self, names: Sequence[str]) -> None:   # under the store's lock, in a transaction
        self._db.execute("INSERT OR REPLACE INTO settings (key, value) VALUES ('goals_done', ?)",
                         (json.dumps(sorted(set(names))),))

    def _with_event(self, event: Audit, change: Callable[[sqlite3.Connection], Any], at: float | None) -> None:
        with self._failing(), self._lock, self._db:
            self._db.execute("BEGIN")
            change(self._db)
            self._db.execute(_INSERT_EVENT, (time.time() if at is None else at, event.kind, event.node_id, event.lease_id,
                                             _detail(event.detail, self.caller())))

    # -- audit log --------------------------------------------------------------------------------

    def record(self, kind: str, node_id: str = "", lease_id: str = "", at: float | None = None,
               **detail: Any) -> None:
        self.apply(Write(events=(Audit(kind, node_id, lease_id, detail),)), at)

    def record_bounded(self, kind: str, details: list[dict[str, Any]], keep: int, at: float | None = None) -> int:
        """Audit events of one kind, then only the newest `keep` of that kind kept: the oldest are
        pruned in the same transaction (a flood of them cannot grow the log without bound).
        Returns how many were pruned."""
        at = time.time() if at is None else at
        with self._failing(), self._lock, self._db:
            self._db.execute("BEGIN")
            self._db.executemany(_INSERT_EVENT, [(at, kind, "", "", _detail(d, "")) for d in details])
            pruned = self._db.execute("DELETE FROM events WHERE kind = ? AND seq NOT IN "
                                      "(SELECT seq FROM events WHERE kind = ? ORDER BY seq DESC LIMIT ?)",
                                      (kind, kind, keep)).rowcount
        return pruned

    # -- retention --------------------------------------------------------------------------------

    PRUNED = (("leases", "lease_id", "ended_at IS NOT NULL AND ended_at < ?"),
              ("requests", "request_id", "outcome != 'pending' AND created_at < ?"),
              ("events", "seq", "at < ?"))

    def prune_batch(self, before: float, batch: int = 500) -> dict[str, int]:
        """One small transaction: at most `batch` rows of each table older than `before` — ended
        leases, resolved requests and audit events — deleted. Returns the rows deleted per table
        (all zero: nothing older is left). Live leases and pending requests are never touched."""
        deleted = {}
        with self._failing(), self._lock, self._db:
            self._db.execute("BEGIN")
            for table, key, old in self.PRUNED:
                deleted[table] = self._db.execute(
                    f"DELETE FROM {table} WHERE {key} IN (SELECT {key} FROM {table} WHERE {old} LIMIT ?)",
                    (before, batch)).rowcount
        return deleted

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


def _lease_row(lease: Lease) -> tuple:
    return tuple(asdict(lease).values())


def _request_row(record: RequestRecord) -> tuple:
    values = asdict(record)
    values["victims"] = json.dumps(list(record.victims))
    return tuple(values.values())


_LEASE_FIELDS = list(Lease.__dataclass_fields__)
_INSERT_LEASE = f"INSERT INTO leases ({', '.join(_LEASE_FIELDS)}) VALUES ({', '.join('?' for _ in _LEASE_FIELDS)})"
_UPSERT_LEASE = _INSERT_LEASE + " ON CONFLICT (lease_id) DO UPDATE SET " + \
    ", ".join(f"{n} = excluded.{n}" for n in _LEASE_FIELDS if n != "lease_id")
_REQUEST_FIELDS = list(RequestRecord.__dataclass_fields__)
_UPSERT_REQUEST = f"INSERT OR REPLACE INTO requests ({', '.join(_REQUEST_FIELDS)}) " \
    f"VALUES ({', '.join('?' for _ in _REQUEST_FIELDS)})"
def _detail(detail: Any, by: str) -> str:
    """An event's detail as stored: with `by`, the caller that caused it, when there is one."""
    return json.dumps({**detail, "by": by} if by and "by" not in detail else dict(detail), default=str,
                      sort_keys=True)


_TENANT_FIELDS = list(TenantRecord.__dataclass_fields__)
_INSERT_TENANT = f"INSERT INTO tenants ({', '.join(_TENANT_FIELDS)}) VALUES ({', '.join('?' for _ in _TENANT_FIELDS)})"
_INSERT_EVENT = "INSERT INTO events (at, kind, node_id, lease_id, detail) VALUES (?, ?, ?, ?, ?)"
_SET_GOAL_PROGRESS = "INSERT OR REPLACE INTO settings (key, value) VALUES ('goal_progress', ?)"
