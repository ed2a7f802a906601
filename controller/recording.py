"""The controller's recording: its inputs and outcomes as JSON lines, to replay through the
simulator (controller/sim/replay.py) and check the simulator against the live controller.

Opt-in, with `[record] path = "/var/lib/gleaner/controller/record.jsonl"` (and `max_mib`, the
file's cap) in the controller's configuration. Each line is one JSON object with `t` (the
controller's clock, seconds since the epoch) and `kind`:

    start         a recording begins (the controller started): the format, the ledger's
                  settings, backfill and reserve settings in force, the tenants as stored
                  (`tenants`, each TenantRecord's fields), the pool's RBT and URR (`tenancy`) and
                  the goal-driven tenants whose job was done (`goals_done`)
    backfill      the backfill settings were changed (gleanctl backfill set)
    tenants       the tenants were changed (gleanctl tenant create, set, delete): all of them as
                  stored now; `goal_begins`, the tenant whose goal was set (its job begins
                  afresh); `sized`, whether the goals were sized at once (a tenant's bounds, goal
                  or backfill changed)
    drain         a `tenant delete --drain` began (draining true: the launcher grants the tenant
                  nothing; each of its VMs' releases follows as a release line) or ended (false)
    request       an on-demand request came (rid, vcpus, memory_mib, image, owner)
    release       a lease was released (key, lease, force)
    report        an agent's report (node, cpus, memory_mib, fg, images, vms: [name, lease, role,
                  state, vcpus, memory_mib, cpu_cores, cpu_sampled, work_state, work_for_s,
                  progress_done, progress_total, progress_for_s] (the guest's word on its work
                  channel; lines written before these were kept end at cpu_cores), saved: its
                  hibernated VMs [name, lease, vcpus, memory_mib, image],
                  hibernation_budget_bytes); only when the node's VMs, their states, whether
                  their CPU was sampled, their guests' word (work state, progress), its saved
                  VMs, budget, size or images changed since its last
                  recorded report (its CPU figures are not compared; `skipped`: how many were left
                  out since), when the books acted on it, when any other line about
                  the node came since (the same report then matches other leases: one sent before a
                  stop ended, arriving after its answer, shows a VM the books ended), or
                  REPORT_HEARTBEAT_S after it
    launch_answer the agent answered a launch (key, ok, detail, delay_s: since the launch was asked)
    stop_answer   ... a stop (key, ok, outcome, seconds as the agent timed it, detail, delay_s)
    job           a periodic job ran: fill and select always, tick when it did something
    lease         the books made a lease (key, lease, role, node, rid)
    launch, stop  the books asked an agent to launch or stop a lease's VM (stop: grace, force,
                  after: the launch it waits for)
    event         an audit event of the books (its kind as `event`, key, node, scalar details;
                  victims as keys): request.placed (path, victims), request.rejected, vm.preempted...
    stopped       the recording stopped (reason: the size cap, or an error writing the file)

Lease ids and VM names are random in the live controller, so each lease also gets a stable `key`,
the same for the same decision in any run (LeaseKeys): `od:REQUEST_ID` for an on-demand VM,
`bf:NODE#N` for the Nth backfill VM the books made on NODE, `adopted:VM` for an adopted one.

Bounded: the file (earlier recordings in it included) never grows past `max_mib`; the last line
then says so. A failed write is logged once and ends the recording; the controller carries on.
Lines are flushed at most once a second (and when the controller stops): a controller that is
killed loses at most the last second.
"""
from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from gleaner_common.logs import log_event

from .core.records import Audit, BackfillConfig, Effect, Launch, Lease, LedgerSettings, Stop, TenantRecord, Write
from .core.tenancy import TenancySettings

log = logging.getLogger(__name__)

RECORD_FORMAT = 1
STOPPED_LINE_BYTES = 512    # kept free under the cap for the line that says the recording stopped
REPORT_HEARTBEAT_S = 30.0   # an unchanged report is recorded again after this long
WORK_SINCE_BUCKET_S = 5.0   # a guest's work state said anew shows when its start moves by this much
FLUSH_SECONDS = 1.0
ENDED_KEYS_KEPT = 10_000    # keys of ended leases still known (a late answer may name one)
# Audit events after which a lease holds nothing any more (controller.core.lifecycle)
TERMINAL_EVENTS = frozenset({"vm.preempted", "vm.stopped", "vm.released", "vm.recycled", "vm.drained",
                             "vm.launch_failed", "vm.stop_expired", "vm.gone", "request.expired"})


class LeaseKeys:
    """Stable keys for leases, from the books' Writes in the order they are made: the same
    decisions give the same keys in the live controller and in a replay."""

    def __init__(self) -> None:
        self.keys: dict[str, str] = {}            # live lease id -> key
        self.leases: dict[str, str] = {}          # key -> live lease id
        self.ended: OrderedDict[str, str] = OrderedDict()   # the last ENDED_KEYS_KEPT ended: lease id -> key
        self.backfill_made: Counter = Counter()   # node -> backfill leases made there

    def made(self, lease: Lease) -> str:
        if lease.lease_id in self.keys:
            return self.keys[lease.lease_id]
        if lease.owner == "adopted":
            key = f"adopted:{lease.vm_name}"
        elif lease.role == "on_demand" and lease.request_id:
            key = f"od:{lease.request_id}"
        elif lease.role == "backfill":
            self.backfill_made[lease.node_id] += 1
            key = f"bf:{lease.node_id}#{self.backfill_made[lease.node_id]}"
        else:
            key = f"lease:{lease.lease_id}"
        self.keys[lease.lease_id] = key
        self.leases[key] = lease.lease_id
        return key

    def key(self, lease_id: str) -> str:
        """The key of a lease; one the books had before the recording began keeps its id."""
        return self.keys.get(lease_id) or self.ended.get(lease_id) or f"lease:{lease_id}"

    def end(self, lease_id: str) -> None:
        """The lease ended: its key is kept a while (memory stays bounded however long the run)."""
        key = self.keys.pop(lease_id, None)
        if key is None:
            return
        self.leases.pop(key, None)
        self.ended[lease_id] = key
        while len(self.ended) > ENDED_KEYS_KEPT:
            self.ended.popitem(last=False)


def _guarded(method: Callable) -> Callable:
    """A hook never raises into the controller: a failure ends the recording, logged once."""
    @functools.wraps(method)
    def hook(self: Recorder, *args: Any, **kwargs: Any) -> None:
        if self.out is None:
            return
        try:
            with self.lock:
                if self.out is not None:
                    method(self, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - recording is never worth the controller
            self._fail(exc)
    return hook


class Recorder:
    """Writes the recording (the module's doc); with no file open, every hook does nothing."""

    def __init__(self, out: IO[str] | None, max_bytes: int, clock: Callable[[], float] = time.time,
                 used_bytes: int = 0, label: str = "") -> None:
        self.out = out
        self.max_bytes = max_bytes
        self.used = used_bytes
        self.clock = clock
        self.label = label
        self.lock = threading.Lock()
        self.keys = LeaseKeys()
        self.asked: dict[str, float] = {}        # lease -> when its launch or stop was asked
        self.after: dict[str, list[str]] = {}    # a launch's lease -> stops asked once it is answered
        self.reported: dict[str, tuple[tuple, float]] = {}   # node -> (what its last recorded report said, when)
        self.held: dict[str, tuple[float, tuple, dict[str, Any]]] = {}   # node -> its last report left out
        self.skipped: dict[str, int] = {}        # node -> reports left out since its last recorded one
        self.flushed = time.monotonic()
        self.flush_seconds = FLUSH_SECONDS
        self.stopped_reason = ""

    @classmethod
    def open(cls, path: Path | None, max_mib: float, clock: Callable[[], float] = time.time) -> Recorder:
        """A recorder appending to `path` (None: recording off). A file that cannot be opened, or
        is full already, is logged and nothing is recorded."""
        if path is None:
            return cls(None, 0, clock)
        max_bytes = int(max_mib * 2**20)
        try:
            out = open(path, "a", encoding="utf-8")
            used = out.tell()
        except OSError as exc:
            log_event(log, "record.unavailable", logging.ERROR, path=str(path), error=str(exc),
                      effect="nothing is recorded")
            return cls(None, 0, clock)
        if used + STOPPED_LINE_BYTES >= max_bytes:
            out.close()
            log_event(log, "record.full", logging.WARNING, path=str(path), bytes=used, max_mib=max_mib,
                      effect="nothing is recorded; move the file away to record again")
            return cls(None, 0, clock)
        log_event(log, "record.started", path=str(path), max_mib=max_mib)
        return cls(out, max_bytes, clock, used, str(path))

    @property
    def enabled(self) -> bool:
        return self.out is not None

    # -- writing ---------------------------------------------------------------------------------

    def _emit(self, kind: str, _at: float | None = None, **fields: Any) -> None:
        at = self.clock() if _at is None else _at
        line = json.dumps({"t": round(at, 6), "kind": kind, **fields}, separators=(",", ":"),
                          default=str) + "\n"
        size = len(line.encode("utf-8"))
        if self.used + size + STOPPED_LINE_BYTES > self.max_bytes:
            self._stop(f"the file reached its cap of {self.max_bytes} bytes ([record] max_mib)", logging.WARNING)
            return
        assert self.out is not None
        self.out.write(line)
        self.used += size
        if kind != "report" and "node" in fields:
            self.reported.pop(fields["node"], None)   # its next report is recorded, changed or not
        if time.monotonic() - self.flushed >= self.flush_seconds:
            self.out.flush()
            self.flushed = time.monotonic()

    def _stop(self, reason: str, level: int) -> None:
        """End the recording with a last line that says why (if it can still be written)."""
        out, self.out, self.stopped_reason = self.out, None, reason
        log_event(log, "record.stopped", level, path=self.label, reason=reason, bytes=self.used)
        if out is None:
            return
        try:
            out.write(json.dumps({"t": round(self.clock(), 6), "kind": "stopped", "reason": reason}) + "\n")
            out.close()
        except (OSError, ValueError):
            pass   # the error that stopped it already said enough

    def _fail(self, exc: Exception) -> None:
        with self.lock:
            if self.out is not None:
                self._stop(f"recording failed: {type(exc).__name__}: {exc}", logging.ERROR)

    def close(self) -> None:
        with self.lock:
            out, self.out = self.out, None
        if out is not None:
            try:
                out.close()
            except OSError as exc:
                log_event(log, "record.stopped", logging.ERROR, path=self.label, reason=f"closing failed: {exc}")

    # -- the controller's inputs -----------------------------------------------------------------

    @_guarded
    def started(self, settings: LedgerSettings, backfill: BackfillConfig, reserves: Mapping[str, Any],
                tenants: Iterable[TenantRecord] = (), tenancy: TenancySettings = TenancySettings(),
                goals_done: Iterable[str] = ()) -> None:
        self._emit("start", format=RECORD_FORMAT, ledger=asdict(settings), backfill=backfill.as_dict(),
                   reserves=dict(reserves), tenants=[asdict(t) for t in tenants], tenancy=asdict(tenancy),
                   goals_done=sorted(goals_done))

    @_guarded
    def backfill(self, config: BackfillConfig) -> None:
        self._emit("backfill", backfill=config.as_dict())

    @_guarded
    def tenants(self, records: Iterable[TenantRecord], goal_begins: str | None = None, sized: bool = False) -> None:
        """The tenants as stored after a change (all of them: a replay sets them as the books were set)."""
        self._emit("tenants", tenants=[asdict(t) for t in records], goal_begins=goal_begins, sized=sized)

    @_guarded
    def drain(self, tenant: str, draining: bool) -> None:
        """A `delete --drain` began (the launcher grants the tenant nothing while it drains) or ended."""
        self._emit("drain", tenant=tenant, draining=draining)

    @_guarded
    def request(self, vcpus: int, memory_mib: int, image: str, owner: str, request_id: str) -> None:
        self._emit("request", rid=request_id, vcpus=vcpus, memory_mib=memory_mib, image=image, owner=owner)

    @_guarded
    def release(self, lease: Lease, force: bool) -> None:
        self._emit("release", key=self.keys.key(lease.lease_id), lease=lease.lease_id, force=force)

    @_guarded
    def report(self, report: Any) -> None:
        vms = [_reported_vm(vm) for vm in report.vms]
        saved = [[vm.name, vm.lease_id, vm.vcpus, vm.memory_mib, vm.image]
                 for vm in getattr(report, "hibernated", ())]   # an agent that hibernates lists them
        budget = int(getattr(report, "hibernation_budget_bytes", 0) or 0)
        # what a repeat must show again: the VMs, their states, whether sampled, their guests' word
        # (a work state said anew, a new job's "busy", shows as another start: its age drops)
        now = self.clock()
        said = (report.cpus, report.memory_mib, tuple(report.images),
                tuple((vm[0], vm[2], vm[3], vm[7], vm[8], _work_began(vm, now), vm[10], vm[11]) for vm in vms),
                tuple(vm[0] for vm in saved), budget)
        fields = dict(node=report.node_id, cpus=report.cpus, memory_mib=report.memory_mib,
                      fg=round(report.foreground_cpu_cores, 3), images=list(report.images),
                      min_memory_mib=report.min_memory_mib, vms=vms, saved=saved, hibernation_budget_bytes=budget)
        last = self.reported.get(report.node_id)
        if last is not None and last[0] == said and time.monotonic() - last[1] < REPORT_HEARTBEAT_S:
            self.held[report.node_id] = (self.clock(), said, fields)   # written if the books act on it
            self.skipped[report.node_id] = self.skipped.get(report.node_id, 0) + 1
            return
        self._write_report(said, fields, self.clock())

    @_guarded
    def report_acted(self, node_id: str) -> None:
        """The books acted on the node's report just taken (its effects are about to be written):
        if it was left out as a repeat, it is written now, at its own time. A repeated report
        matches anew as time passes (a VM missing past lost_after is found lost)."""
        held = self.held.pop(node_id, None)
        if held is None:
            return
        at, said, fields = held
        self.skipped[node_id] = self.skipped.get(node_id, 1) - 1   # the ones left out before it
        self._write_report(said, fields, at)

    def _write_report(self, said: tuple, fields: dict[str, Any], at: float) -> None:
        node = fields["node"]
        self.held.pop(node, None)
        self.reported[node] = (said, time.monotonic())
        self._emit("report", _at=at, skipped=self.skipped.pop(node, 0), **fields)

    @_guarded
    def launch_answer(self, lease: Lease, ok: bool, detail: str) -> None:
        now = self.clock()
        asked = self.asked.pop(lease.lease_id, now)
        self._emit("launch_answer", key=self.keys.key(lease.lease_id), lease=lease.lease_id, node=lease.node_id,
                   ok=ok, detail=detail, delay_s=round(now - asked, 6))
        for stop in self.after.pop(lease.lease_id, ()):   # asked of the agent only now (Stop.after_launch)
            self.asked[stop] = now

    @_guarded
    def stop_answer(self, lease: Lease, ok: bool, outcome: str, seconds: float, detail: str) -> None:
        now = self.clock()
        asked = self.asked.pop(lease.lease_id, now)
        self._emit("stop_answer", key=self.keys.key(lease.lease_id), lease=lease.lease_id, node=lease.node_id,
                   ok=ok, outcome=outcome, seconds=round(seconds, 6), detail=detail, delay_s=round(now - asked, 6))

    @_guarded
    def job(self, name: str, effects: Sequence[Effect]) -> None:
        """A periodic job ran (a tick only when it did something)."""
        if name != "tick" or effects:
            self._emit("job", name=name, effects=len(effects))

    # -- the books' decisions --------------------------------------------------------------------

    @_guarded
    def effects(self, effects: Sequence[Effect]) -> None:
        """What the books decided and carried out (committed, calls made): new leases, audit
        events, and the calls asked of agents."""
        now = self.clock()
        first_launch: dict[str, str] = {}
        for effect in effects:
            if type(effect) is Write:
                for lease in effect.created:
                    key = self.keys.made(lease)
                    self._emit("lease", key=key, lease=lease.lease_id, role=lease.role, node=lease.node_id,
                               rid=lease.request_id, vcpus=lease.vcpus, memory_mib=lease.memory_mib,
                               state=lease.state)
                for event in effect.events:
                    self._event(event)
            elif type(effect) is Launch:
                first_launch.setdefault(effect.lease.node_id, effect.lease.lease_id)
                self.asked[effect.lease.lease_id] = now
                self._emit("launch", key=self.keys.key(effect.lease.lease_id), node=effect.lease.node_id)
            elif type(effect) is Stop:
                lease = effect.lease
                after = first_launch.get(lease.node_id) if effect.after_launch else None
                if after is None:
                    self.asked[lease.lease_id] = now
                else:
                    self.after.setdefault(after, []).append(lease.lease_id)
                self._emit("stop", key=self.keys.key(lease.lease_id), node=lease.node_id,
                           grace=effect.grace_seconds, force=effect.force,
                           after=self.keys.key(after) if after else None)

    def _event(self, event: Audit) -> None:
        detail = {k: v for k, v in event.detail.items() if isinstance(v, (str, int, float, bool)) or v is None}
        if "victims" in event.detail:
            detail["victims"] = [self.keys.key(v) for v in event.detail["victims"]]
        self._emit("event", event=event.kind, key=self.keys.key(event.lease_id) if event.lease_id else "",
                   node=event.node_id, **{k: v for k, v in detail.items() if k not in ("t", "kind", "event", "key",
                                                                                        "node")})
        if event.kind in TERMINAL_EVENTS and event.lease_id:
            self.keys.end(event.lease_id)
            self.asked.pop(event.lease_id, None)
            self.after.pop(event.lease_id, None)


def _reported_vm(vm: Any) -> list[Any]:
    """A reported VM as a report line keeps it (the module's doc: `vms`). The guest's word is read
    with getattr: the simulator's VMs and older agents' have none of it."""
    return [vm.name, vm.lease_id, vm.role, getattr(vm, "state", ""), vm.vcpus, vm.memory_mib, round(vm.cpu_cores, 3),
            bool(getattr(vm, "cpu_sampled", True)), getattr(vm, "work_state", "") or "",
            round(float(getattr(vm, "work_for_s", 0.0) or 0.0), 3), int(getattr(vm, "progress_done", 0) or 0),
            int(getattr(vm, "progress_total", 0) or 0), round(float(getattr(vm, "progress_for_s", 0.0) or 0.0), 3)]


def _work_began(vm: list[Any], now: float) -> int:
    """When the guest said its work state, in WORK_SINCE_BUCKET_S steps (0: it said none): a
    state said anew starts later, while the same one's age grows with the clock. Steps, so that
    the agent's and the controller's clocks jittering by milliseconds seldom make news."""
    return round((now - vm[9]) / WORK_SINCE_BUCKET_S) if vm[8] else 0


def read_recording(path: Path) -> list[dict[str, Any]]:
    """A recording's lines, as written (a torn last line, from a controller killed mid-write, is left out)."""
    with open(path, encoding="utf-8") as f:
        return parse_recording(f, str(path))


def parse_recording(texts: Iterable[str], source: str) -> list[dict[str, Any]]:
    """The lines of a recording read as text, each with its newline: a torn last line (none) is
    left out; a bad line within is a ValueError naming `source` and the line."""
    lines = []
    for number, text in enumerate(texts, 1):
        try:
            lines.append(json.loads(text))
        except json.JSONDecodeError:
            if text.endswith("\n"):
                raise ValueError(f"{source}: line {number} is not JSON: {text[:80]!r}") from None
    return lines
