"""Reading a controller's recording (controller/recording.py) for a replay (controller/sim/replay.py):
its last segment (each controller start begins one), its times made relative to that start, and
its lines sorted into what the replay feeds: the nodes' first reports, requests, releases, the
jobs that ran, the backfill settings and tenants with their changes, a `delete --drain`'s
draining, the agents' answers and reports. A line the books could not take is refused at load,
naming it.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.bounds import tenant_of_record
from ..core.records import BackfillConfig, LedgerSettings, TenantRecord
from ..core.reserve_settings import ReserveSettings
from ..core.tenancy import TenancySettings
from ..recording import read_recording


LIVENESS_EVENTS = ("node.suspect", "node.down")   # only a tick finds them, from how long a node was silent


@dataclass(frozen=True)
class NodeJoin:
    at: float
    node_id: str
    cpus: int
    memory_mib: int
    images: tuple[str, ...]


@dataclass
class Recording:
    """One segment of a recording (from a `start` line to the next), its times made relative to
    its start, read into what a replay needs."""
    lines: list[dict[str, Any]]
    t0: float
    ledger: LedgerSettings
    backfill: BackfillConfig
    reserves: ReserveSettings
    nodes: list[NodeJoin] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    releases: list[dict[str, Any]] = field(default_factory=list)
    jobs: list[dict[str, Any]] = field(default_factory=list)
    backfill_changes: list[tuple[float, BackfillConfig]] = field(default_factory=list)
    tenants: list[TenantRecord] = field(default_factory=list)   # as stored at the start
    tenancy: TenancySettings = TenancySettings()
    goals_done: list[str] = field(default_factory=list)
    tenant_changes: list[dict[str, Any]] = field(default_factory=list)   # the `tenants` lines
    drains: list[dict[str, Any]] = field(default_factory=list)   # the `drain` lines (delete --drain)
    launch_answers: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    stop_answers: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    reports: list[dict[str, Any]] = field(default_factory=list)
    lease_keys: dict[str, str] = field(default_factory=dict)   # live lease id -> its key
    stopped: str = ""   # why the recording stopped early ("": it did not)

    @property
    def span(self) -> float:
        return self.lines[-1]["t"] if self.lines else 0.0


def segments(lines: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The recording's segments: each controller start begins one."""
    out: list[list[dict[str, Any]]] = []
    for line in lines:
        if line.get("kind") == "start":
            out.append([])
        if out:
            out[-1].append(line)
    return out


def load(source: Path | Sequence[dict[str, Any]], segment: int = -1) -> Recording:
    """A recording (a file, or its lines) read for replay: segment `segment` (the last by default)."""
    lines = read_recording(source) if isinstance(source, Path) else list(source)
    parts = segments(lines)
    if not parts:
        raise ValueError(f"{source if isinstance(source, Path) else 'the recording'}: no `start` line: not a "
                         f"controller recording")
    part = parts[segment]
    start = part[0]
    if start.get("format") != 1:
        raise ValueError(f"recording format {start.get('format')!r}: this replay reads format 1")
    t0 = start["t"]
    rel = [{**line, "t": max(line["t"] - t0, 0.0)} for line in part]
    rec = Recording(rel, t0, LedgerSettings(**start["ledger"]), BackfillConfig.from_dict(start["backfill"]),
                    ReserveSettings.from_dict(start["reserves"]),
                    tenants=_tenant_records(start.get("tenants", []), 0.0), tenancy=_tenancy(start.get("tenancy", {})),
                    goals_done=_names(start.get("goals_done", []), "goals_done"))
    seen: set[str] = set()
    verdicts: dict[str, str] = {}   # the node.suspect and node.down events since the last tick line
    for line in rel:
        kind = line["kind"]
        if kind == "report":
            rec.reports.append(line)
            if line["node"] not in seen:
                seen.add(line["node"])
                rec.nodes.append(NodeJoin(line["t"], line["node"], line["cpus"], line["memory_mib"],
                                          tuple(line["images"])))
        elif kind == "lease" and line.get("lease"):
            rec.lease_keys.setdefault(line["lease"], line["key"])
        elif kind == "request":
            rec.requests.append(line)
        elif kind == "release":
            rec.releases.append(line)
        elif kind == "job":
            if line.get("name") == "tick" and verdicts:   # the tick that found them (its events come first)
                line, verdicts = {**line, "silent": verdicts}, {}
            rec.jobs.append(line)
        elif kind == "event" and line.get("event") in LIVENESS_EVENTS and isinstance(line.get("node"), str):
            verdicts[line["node"]] = line["event"]
        elif kind == "backfill":
            rec.backfill_changes.append((line["t"], BackfillConfig.from_dict(line["backfill"])))
        elif kind == "tenants":
            rec.tenant_changes.append({**line, "tenants": _tenant_records(line.get("tenants"), line["t"])})
        elif kind == "drain":
            rec.drains.append(_drain(line))
        elif kind == "launch_answer":
            rec.launch_answers.setdefault(line["key"], []).append(line)
        elif kind == "stop_answer":
            rec.stop_answers.setdefault(line["key"], []).append(line)
        elif kind == "stopped":
            rec.stopped = line.get("reason", "")
    if not rec.nodes:
        raise ValueError("the recording has no report: no node to replay on")
    return rec


def _tenant_records(rows: Any, t: float) -> list[TenantRecord]:
    """A `start` or `tenants` line's tenants (at `t`), as the books take them; else ValueError naming one."""
    if not isinstance(rows, list):
        raise ValueError(f"the recording's tenants at {t:.3f} s: {rows!r:.80} is not a list of tenants")
    records = []
    for row in rows:
        name = row.get("name", "?") if isinstance(row, Mapping) else "?"
        try:
            if not isinstance(row, Mapping):
                raise TypeError(f"{row!r:.80} is not a tenant's fields")
            record = TenantRecord(**row)
            tenant_of_record(record)   # its kind and bounds as the books take them
        except (TypeError, ValueError) as exc:   # a field missing, unknown or out of bounds (another version's)
            raise ValueError(f"the recording's tenants at {t:.3f} s: {name!r}: {exc}") from None
        records.append(record)
    return records


def _tenancy(values: Any) -> TenancySettings:
    """The start line's RBT and URR (ValueError naming them when they are not)."""
    try:
        return TenancySettings(**values)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"the recording's tenancy {values!r:.80}: {exc}") from None


def _names(values: Any, field: str) -> list[str]:
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ValueError(f"the recording's {field} {values!r:.80} is not a list of names")
    return list(values)


def _drain(line: dict[str, Any]) -> dict[str, Any]:
    """A `drain` line, checked (ValueError naming it otherwise)."""
    if not isinstance(line.get("tenant"), str) or not isinstance(line.get("draining"), bool):
        raise ValueError(f"the recording's drain at {line['t']:.3f} s: {line!r:.120} names no tenant and whether "
                         "it drains")
    return line
