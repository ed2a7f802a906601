"""The simulator's tenants file and the mapping of a trace's owners to tenants (the file's format
and the rules are in controller/sim/tenants.py's doc): TenantsConfig, load_tenants, the
assignment of requests and jobs, and the records the books take. Pure: no simulation here."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gleaner_common.ids import InvalidField

from ..core.goals import goal_from_dict
from ..core.records import BACKFILL_TENANT, DEFAULT_TENANT, Size, TenantRecord
from ..core.tenancy import TENANT_BACKFILL_KEYS, Tenant, TenancySettings, admit, check_size, show
from . import swf
from .trace_base import Job, OnDemandRequest

ON_DEMAND_KEYS = ("auto", "owner", "swf_user", "swf_group")
BATCH_KEYS = ("swf_user", "swf_group")
SIM_GOAL_KEYS = ("deadline_after_s", "deadline_on_residual")


class TenantsError(ValueError):
    """The tenants file is wrong: the message names the file, the key and what is allowed."""


@dataclass(frozen=True)
class TenantSpec:
    name: str
    kind: str                                  # on_demand | batch
    lower: Size
    upper: Size
    owners: frozenset[str] = frozenset()
    share: float = 0.0
    start_s: float = 0.0
    backfill: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    goal: Mapping[str, Any] | None = None
    work: Mapping[str, Any] | None = None

    @property
    def batch(self) -> bool:
        return self.kind == "batch"


@dataclass(frozen=True)
class TenantsConfig:
    tenants: tuple[TenantSpec, ...]
    rbt: float = 1.0
    urr: float = 1.0
    on_demand_key: str = "auto"
    batch_key: str = "swf_user"
    seed: int = 0
    source: str = "tenants"

    @property
    def settings(self) -> TenancySettings:
        return TenancySettings(self.rbt, self.urr)

    def named(self, name: str) -> TenantSpec | None:
        return next((t for t in self.tenants if t.name == name), None)


# ------------------------------------------------------------------------------- the file

def load_tenants(path: Path | str) -> TenantsConfig:
    """The tenants file, checked; TenantsError names the file, the key and the value."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise TenantsError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise TenantsError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'TOML'}: {exc}") from None
    return tenants_config(data, str(path))


def tenants_config(data: Mapping[str, Any], source: str = "tenants") -> TenantsConfig:
    """A TenantsConfig from the file's table (see the module's doc)."""
    if not isinstance(data, Mapping):
        raise TenantsError(f"{source}: expected a table of rbt, urr, assign and tenants")
    _unknown(data, ("rbt", "urr", "assign", "tenants"), source)
    assign = data.get("assign", {})
    if not isinstance(assign, Mapping):
        raise TenantsError(f"{source}: assign: expected a table of on_demand_key, batch_key, seed")
    _unknown(assign, ("on_demand_key", "batch_key", "seed"), f"{source}: assign")
    on_key, batch_key = assign.get("on_demand_key", "auto"), assign.get("batch_key", "swf_user")
    if on_key not in ON_DEMAND_KEYS:
        raise TenantsError(f"{source}: assign.on_demand_key {on_key!r}: one of {', '.join(ON_DEMAND_KEYS)}")
    if batch_key not in BATCH_KEYS:
        raise TenantsError(f"{source}: assign.batch_key {batch_key!r}: one of {', '.join(BATCH_KEYS)}")
    seed = assign.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TenantsError(f"{source}: assign.seed {seed!r}: a whole number")
    rows = data.get("tenants")
    if not isinstance(rows, list) or not rows:
        raise TenantsError(f"{source}: tenants: expected a list of tenants ([[tenants]] tables), at least one")
    specs = tuple(_spec(row, f"{source}: tenants[{i}]") for i, row in enumerate(rows))
    names = [s.name for s in specs]
    for name in set(names):
        if names.count(name) > 1:
            raise TenantsError(f"{source}: tenant name {name!r} is given {names.count(name)} times")
    for kind in ("on_demand", "batch"):
        shares = sum(s.share for s in specs if s.kind == kind)
        if shares > 1 + 1e-9:
            raise TenantsError(f"{source}: the {kind} tenants' shares add up to {shares:g}; at most 1")
    try:
        settings = TenancySettings(data.get("rbt", 1.0), data.get("urr", 1.0))
    except InvalidField as exc:
        raise TenantsError(f"{source}: {exc}") from None
    return TenantsConfig(specs, settings.rbt, settings.urr, on_key, batch_key, seed, source)


def _unknown(table: Mapping[str, Any], allowed: Sequence[str], where: str) -> None:
    extra = sorted(set(table) - set(allowed))
    if extra:
        raise TenantsError(f"{where}: unknown key(s) {', '.join(extra)}; allowed: {', '.join(allowed)}")


SPEC_KEYS = ("name", "kind", "lower", "upper", "owners", "share", "start_s", "backfill", "goal", "work")


def _spec(row: Any, where: str) -> TenantSpec:
    if not isinstance(row, Mapping):
        raise TenantsError(f"{where}: expected a table")
    _unknown(row, SPEC_KEYS, where)
    name, kind = row.get("name"), str(row.get("kind", "")).replace("-", "_")
    lower, upper = _size(row.get("lower"), f"{where}.lower"), _size(row.get("upper"), f"{where}.upper")
    try:
        Tenant(name, kind, lower, upper)   # the core's checks: the name, the kind, the sizes
    except InvalidField as exc:
        raise TenantsError(f"{where}: {exc}") from None
    if not lower.fits_in(upper):
        raise TenantsError(f"{where}: lower bound {show(lower)} is past the upper bound {show(upper)}")
    share = row.get("share", 0.0)
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
        raise TenantsError(f"{where}.share {share!r}: a number from 0 to 1")
    owners = row.get("owners", [])
    if not isinstance(owners, list):
        raise TenantsError(f"{where}.owners {owners!r}: a list of owner names or numbers")
    start = row.get("start_s", 0.0)
    if isinstance(start, bool) or not isinstance(start, (int, float)) or not 0 <= start < 1e9:
        raise TenantsError(f"{where}.start_s {start!r}: seconds from 0 to 1e9")
    spec = TenantSpec(name, kind, lower, upper, frozenset(str(o) for o in owners), float(share), float(start),
                      dict(row.get("backfill") or {}), row.get("goal"), row.get("work"))
    if kind != "batch":
        for key in ("backfill", "goal", "work"):
            if row.get(key) is not None:
                raise TenantsError(f"{where}.{key}: only a batch tenant has one ({name!r} is {kind})")
        if start:
            raise TenantsError(f"{where}.start_s: only a batch tenant has one ({name!r} is {kind})")
        return spec
    _check_batch(spec, where)
    return spec


def _size(value: Any, where: str) -> Size:
    if not isinstance(value, Mapping) or set(value) != {"vcpus", "memory_mib"}:
        raise TenantsError(f"{where}: expected {{vcpus = N, memory_mib = N}}, got {value!r}")
    try:
        return check_size(Size(value["vcpus"], value["memory_mib"]), where.rpartition(": ")[2])
    except InvalidField as exc:
        raise TenantsError(f"{where}: {exc}") from None


def _check_batch(spec: TenantSpec, where: str) -> None:
    extra = sorted(set(spec.backfill) - set(TENANT_BACKFILL_KEYS))
    if extra:
        raise TenantsError(f"{where}.backfill: unknown key(s) {', '.join(extra)}; allowed: "
                           f"{', '.join(TENANT_BACKFILL_KEYS)}")
    if spec.goal is not None:
        if not isinstance(spec.goal, Mapping):
            raise TenantsError(f"{where}.goal: expected a table")
        try:
            goal_from_dict(_goal_at(spec, 0.0))
        except InvalidField as exc:
            raise TenantsError(f"{where}.goal: {exc}") from None
    if spec.work is not None:
        work = spec.work
        if not isinstance(work, Mapping):
            raise TenantsError(f"{where}.work: expected a table")
        _unknown(work, ("vcpu_hours", "procs", "runtime_s"), f"{where}.work")
        for key, low, high in (("vcpu_hours", 1e-6, 1e7), ("procs", 1, 1024), ("runtime_s", 1.0, 1e7)):
            value = work.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
                raise TenantsError(f"{where}.work.{key} {value!r}: a number from {low:g} to {high:g}")
        if work["procs"] != int(work["procs"]):
            raise TenantsError(f"{where}.work.procs {work['procs']!r}: a whole number")


def _goal_at(spec: TenantSpec, residual_vcpus: float) -> dict[str, Any]:
    """The tenant's goal as the books take it: a deadline relative to the start (deadline_after_s)
    or on the predicted residual (deadline_on_residual: on_residual_s) made absolute."""
    goal = spec.goal
    out = {k: v for k, v in goal.items() if k not in SIM_GOAL_KEYS}
    if goal.get("deadline_after_s") is not None:
        out["deadline_s"] = spec.start_s + goal["deadline_after_s"]
    elif goal.get("deadline_on_residual"):
        out["deadline_s"] = spec.start_s + on_residual_s(spec, residual_vcpus)
    return out


def on_residual_s(spec: TenantSpec, residual_vcpus: float) -> float:
    """Seconds the tenant's work takes on `residual_vcpus` alone, within its upper bound (1e9 when
    nothing runs): with a bag of jobs (`work`), whole jobs in waves, ceil(jobs / jobs at once) x
    their run time, as a job cannot be split across VMs; else the goal's W over the residual."""
    residual = min(residual_vcpus, spec.upper.vcpus)
    if residual <= 0:
        return 1e9
    jobs = bag_of_jobs(spec, 0.0)
    if not jobs:
        return spec.goal.get("work_vcpu_hours", 0) / residual * 3600.0
    at_once = int(residual // jobs[0].procs)
    return math.ceil(len(jobs) / at_once) * jobs[0].runtime if at_once > 0 else 1e9


def check_admission(config: TenantsConfig, capacity: Size) -> None:
    """PhoenixCloud's admission of the file's tenants into an empty pool of `capacity` (the sum of
    upper bounds within capacity x RBT, the lower bounds within what is idle: all of it)."""
    tenants = [Tenant(s.name, s.kind, s.lower, s.upper) for s in config.tenants]
    verdict = admit([], tenants, capacity, capacity, config.settings)
    if not verdict.admitted:
        raise TenantsError(f"{config.source}: the tenants are not admitted to a pool of {show(capacity)}: "
                           f"{verdict.reason}")


# ------------------------------------------------------------------------------- the mapping

def share_point(seed: int, item_id: str) -> float:
    """A request's or job's place in [0, 1) for the shares: sha256 of "seed:id", seeded per item."""
    digest = hashlib.sha256(f"{seed}:{item_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0 ** 64


def tenant_for(owner: str | None, item_id: str, specs: Sequence[TenantSpec], seed: int, fallback: str) -> str:
    """The tenant of one request or job among `specs` (those of its kind): by owner, else by share,
    else `fallback` (the module's doc, the rules in order)."""
    if owner is not None:
        for spec in specs:
            if owner in spec.owners:
                return spec.name
    point, upto = share_point(seed, item_id), 0.0
    for spec in specs:
        upto += spec.share
        if spec.share > 0 and point < upto:
            return spec.name
    return fallback


def _base_id(item_id: str) -> str:
    """A tiled copy's id without its copy number (traces.tile: <id>#<k>)."""
    return item_id.partition("#")[0]


def swf_owners(path: Path | str, key: str) -> dict[str, str]:
    """SWF job id -> its user or group (key swf_user or swf_group), for SWF on-demand requests."""
    field = "user" if key == "swf_user" else "group"
    return {job.job_id: str(getattr(job, field)) for job in swf.swf_jobs(path)}


def assign_requests(requests: Sequence[OnDemandRequest], config: TenantsConfig, fmt: str = "csv",
                    swf_path: Path | str | None = None) -> list[OnDemandRequest]:
    """The requests with their tenant as owner (the books take a request's owner as its tenant)."""
    key = config.on_demand_key
    if key == "auto":
        key = "swf_user" if fmt == "swf" else "owner"
    if key != "owner" and fmt != "swf":
        raise TenantsError(f"{config.source}: assign.on_demand_key {key!r} needs an SWF trace (--format swf)")
    owners = swf_owners(swf_path, key) if key != "owner" and swf_path is not None else {}
    specs = [s for s in config.tenants if s.kind == "on_demand"]

    def owner(request: OnDemandRequest) -> str | None:
        return request.owner if key == "owner" else owners.get(_base_id(request.request_id))

    return [dataclasses.replace(r, owner=tenant_for(owner(r), r.request_id, specs, config.seed, DEFAULT_TENANT))
            for r in requests]


def assign_jobs(jobs: Sequence[Job], config: TenantsConfig) -> dict[str, list[Job]]:
    """The --backfill-jobs jobs by batch tenant (SWF user or group, else share, else the built-in)."""
    field = "user" if config.batch_key == "swf_user" else "group"
    specs = [s for s in config.tenants if s.batch]
    out: dict[str, list[Job]] = {}
    for job in jobs:
        owner = getattr(job, field)
        name = tenant_for(None if owner < 0 else str(owner), job.job_id, specs, config.seed, BACKFILL_TENANT)
        out.setdefault(name, []).append(job)
    return out


def bag_of_jobs(spec: TenantSpec, at: float) -> list[Job]:
    """A tenant's `work`: jobs of `procs` vCPUs and `runtime_s` making `vcpu_hours`, all submitted at `at`."""
    if not spec.work:
        return []
    procs, runtime = int(spec.work["procs"]), float(spec.work["runtime_s"])
    left = float(spec.work["vcpu_hours"]) * 3600.0
    jobs: list[Job] = []
    while left > 1e-6:
        seconds = min(runtime, left / procs)
        jobs.append(Job(at, seconds, procs, f"{spec.name}-w{len(jobs)}", 0))
        left -= seconds * procs
    return jobs


def records(config: TenantsConfig, now: float, started: Mapping[str, float] | None = None) -> list[TenantRecord]:
    """The tenants as the store holds them, at `now`: a batch tenant before its start_s has its
    backfill off; a tenant in `started` (name -> the residual the books predicted for it at its
    start) has its goal, its deadline made absolute."""
    out = []
    for spec in config.tenants:
        backfill, goal = dict(spec.backfill), None
        if spec.batch and now < spec.start_s:
            backfill["enabled"] = False
        elif spec.goal is not None and started and spec.name in started:
            goal = json.dumps(_goal_at(spec, started[spec.name]))
        out.append(TenantRecord(spec.name, spec.kind, spec.lower.vcpus, spec.lower.memory_mib, spec.upper.vcpus,
                                spec.upper.memory_mib, 0.0, json.dumps(backfill) if backfill else None, goal))
    return out
