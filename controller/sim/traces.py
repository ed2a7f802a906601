"""Trace adapters: public workload traces read into plain Python data for the simulator.

Pure Python and numpy. Every adapter takes a path to a plain or gzipped file (gzip is recognised
by its magic bytes, not by the name) and returns a list sorted by time (stable: ties keep file
order). Times are seconds, as floats. Malformed input raises TraceError, a ValueError whose
message starts with ``FILE:LINE:`` (for a member of a tar archive, ``ARCHIVE[MEMBER]:LINE:``).

What each adapter yields, all importable from here:

- ``azure_requests``: Azure Packing 2020 VM requests (``vm_entry_list_5000.csv.gz``) as
  OnDemandRequest; ``priority=0`` on-demand VMs, ``priority=1`` the trace's own low-priority VMs
  (controller/sim/cloud_traces.py).
- ``swf_read`` / ``swf_jobs`` / ``swf_stats``: Standard Workload Format job traces as Job (backfill
  work), with counts of what was skipped; ``swf_requests``: the same jobs as on-demand VMs
  (controller/sim/swf.py).
- ``bitbrains_series``: Bitbrains per-VM CPU series (tar.gz of per-VM CSVs) as DemandSeries
  (controller/sim/cloud_traces.py).
- ``alibaba_series``: Alibaba 2018 ``machine_usage.csv`` as DemandSeries, one per machine
  (controller/sim/cloud_traces.py).
- ``csv_requests``: Gleaner's own on-demand request format (below; this module).
- ``pool_groups``: a pool of nodes of several sizes (below), as NodeGroup (this module).
- ``digest``: sha256 of a file's bytes, for the simulator's summary header (this module).
- ``tile``, ``tile_jobs``, ``scale_time``: stretch a short or small trace to a longer run (this
  module).

The records (OnDemandRequest, Job, DemandSeries), TraceError and the reading of lines, CSV
tables and fields are controller/sim/trace_base.py.

Gleaner's on-demand request CSV (``csv_requests``)
---------------------------------------------------
UTF-8 text, plain or gzipped, comma-separated, quoting as in RFC 4180 (Python's csv module).

- The first line that is neither blank nor a comment is the header. It names the columns
  ``arrival_s,vcpus,memory_mib,lifetime_s`` and optionally ``owner``, in any order; any other
  column name is an error.
- Blank lines and lines starting with ``#`` are ignored anywhere.
- Every other line is one request, with exactly as many fields as the header:

  - ``arrival_s``: arrival time in seconds from the start of the simulation, a finite number >= 0;
  - ``vcpus``: an integer >= 1;
  - ``memory_mib``: an integer >= 1 (MiB);
  - ``lifetime_s``: seconds the VM runs once started, a finite number > 0; empty means it runs to
    the end of the simulation (lifetime None);
  - ``owner``: free text; empty or an absent column means ``"trace"``.

- Rows need not be sorted; the result is sorted by arrival (ties keep file order).
- The request id is ``csv-N``, N counting request rows from 1 in file order.

Example::

    arrival_s,vcpus,memory_mib,lifetime_s,owner
    0,2,4096,3600,alice
    30.5,8,16384,,bob

Gleaner's pool CSV (``pool_groups``)
------------------------------------
The same rules for text, header, blank and comment lines, with the columns
``count,cpus,memory_mib``: each row is ``count`` nodes (an integer from 1 to 100,000) of ``cpus``
vCPUs (1 to 4,096) and ``memory_mib`` MiB (1 to 2**32), at most 100,000 nodes in all. The nodes
are numbered in file order. Example::

    count,cpus,memory_mib
    600,16,65536
    400,32,131072
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from .cloud_traces import (AZURE_MACHINE_MEMORY_MIB, AZURE_MACHINE_VCPUS, BITBRAINS_CPU_PERCENT, DAY_S,
                           alibaba_series, azure_requests, bitbrains_series)
from .swf import SWF_FIELDS, SWF_MEMORY_MIB_PER_VCPU, SwfStats, SwfTrace, swf_jobs, swf_read, swf_requests, swf_stats
from .trace_base import (DemandSeries, FloatArray, Job, OnDemandRequest, PathLike, TraceError, _at_least, _Bad,
                         _by_time, _csv_table, _float, _int, _located)

__all__ = [
    # the records, and the error every adapter raises (trace_base.py)
    "DemandSeries", "FloatArray", "Job", "OnDemandRequest", "PathLike", "TraceError",
    # cloud_traces.py
    "AZURE_MACHINE_MEMORY_MIB", "AZURE_MACHINE_VCPUS", "BITBRAINS_CPU_PERCENT", "DAY_S", "alibaba_series",
    "azure_requests", "bitbrains_series",
    # swf.py
    "SWF_FIELDS", "SWF_MEMORY_MIB_PER_VCPU", "SwfStats", "SwfTrace", "swf_jobs", "swf_read", "swf_requests",
    "swf_stats",
    # this module
    "POOL_MAX_CPUS", "POOL_MAX_MEMORY_MIB", "POOL_MAX_NODES", "Item", "NodeGroup", "csv_requests", "digest",
    "pool_groups", "scale_time", "tile", "tile_jobs",
]


# ---------------------------------------------------------------- Gleaner's CSV

def csv_requests(path: PathLike) -> list[OnDemandRequest]:
    """On-demand requests in Gleaner's own CSV format (specified in the module docstring)."""
    out: list[OnDemandRequest] = []
    rows = _csv_table(path, ("arrival_s", "vcpus", "memory_mib", "lifetime_s"), ("owner",))
    for lineno, row in rows:
        with _located(path, lineno):
            out.append(_csv_request(row, f"csv-{len(out) + 1}"))
    return _by_time(out)


def _csv_request(row: dict[str, str], request_id: str) -> OnDemandRequest:
    at = _float(row["arrival_s"], "arrival_s")
    _at_least(at, 0, "arrival_s")
    vcpus = _int(row["vcpus"], "vcpus")
    _at_least(vcpus, 1, "vcpus")
    memory = _int(row["memory_mib"], "memory_mib")
    _at_least(memory, 1, "memory_mib")
    lifetime = None if row["lifetime_s"] == "" else _float(row["lifetime_s"], "lifetime_s")
    if lifetime is not None and lifetime <= 0:
        raise _Bad(f"lifetime_s: must be > 0 (or empty for 'to the end'), got {lifetime:g}")
    return OnDemandRequest(at=at, vcpus=vcpus, memory_mib=memory, lifetime=lifetime,
                           owner=row.get("owner") or "trace", request_id=request_id)


@dataclass(frozen=True)
class NodeGroup:
    """`count` nodes of one size (a simulated pool is one or more groups)."""
    count: int
    cpus: int
    memory_mib: int


POOL_MAX_NODES = 100_000
POOL_MAX_CPUS = 4096
POOL_MAX_MEMORY_MIB = 2**32


def pool_groups(path: PathLike) -> list[NodeGroup]:
    """A pool of nodes of several sizes in Gleaner's pool CSV (specified in the module docstring)."""
    groups: list[NodeGroup] = []
    for lineno, row in _csv_table(path, ("count", "cpus", "memory_mib")):
        with _located(path, lineno):
            groups.append(_node_group(row, sum(g.count for g in groups)))
    if not groups:
        raise TraceError(f"{path}: no nodes (expected rows of count,cpus,memory_mib after the header)")
    return groups


def _node_group(row: dict[str, str], nodes_before: int) -> NodeGroup:
    group = NodeGroup(_int(row["count"], "count"), _int(row["cpus"], "cpus"), _int(row["memory_mib"], "memory_mib"))
    for value, high, name in ((group.count, POOL_MAX_NODES, "count"), (group.cpus, POOL_MAX_CPUS, "cpus"),
                              (group.memory_mib, POOL_MAX_MEMORY_MIB, "memory_mib")):
        _at_least(value, 1, name)
        if value > high:
            raise _Bad(f"{name}: must be <= {high:,}, got {value:,}")
    if nodes_before + group.count > POOL_MAX_NODES:
        raise _Bad(f"count: the pool would have {nodes_before + group.count:,} nodes (at most {POOL_MAX_NODES:,})")
    return group


# ---------------------------------------------------------------- digests and reshaping

def digest(path: PathLike) -> str:
    """Hex sha256 of the file's bytes (of the compressed bytes, for a .gz)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _positive(value: float, name: str) -> None:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


Item = TypeVar("Item", OnDemandRequest, Job)

# (time field, duration field, id field) per item type
_FIELDS: dict[type, tuple[str, str, str]] = {
    OnDemandRequest: ("at", "lifetime", "request_id"),
    Job: ("submit", "runtime", "job_id"),
}


def tile(requests: Sequence[OnDemandRequest], period_s: float,
         until_s: float) -> list[OnDemandRequest]:
    """Repeat the requests every ``period_s`` seconds: copy k arrives k x period_s later.
    Keeps every copy arriving before ``until_s``. Copy 0 keeps its ids; copy k >= 1 gets
    ``<id>#<k>``. Lifetimes are unchanged. Sorted by arrival."""
    return _tile(requests, period_s, until_s, OnDemandRequest)


def tile_jobs(jobs: Sequence[Job], period_s: float, until_s: float) -> list[Job]:
    """``tile`` for jobs: submit times shifted, ids ``<id>#<k>`` for copies k >= 1."""
    return _tile(jobs, period_s, until_s, Job)


def _tile(items: Sequence[Item], period_s: float, until_s: float, kind: type) -> list[Item]:
    _positive(period_s, "period_s")
    time_field, _, id_field = _FIELDS[kind]
    out: list[Item] = []
    for k in itertools.count():
        copies = [_shifted(item, k, k * period_s, time_field, id_field) for item in items
                  if getattr(item, time_field) + k * period_s < until_s]
        if not copies:
            return sorted(out, key=lambda i: getattr(i, time_field))
        out.extend(copies)
    raise AssertionError("unreachable")


def _shifted(item: Item, k: int, shift: float, time_field: str, id_field: str) -> Item:
    if k == 0:
        return item
    changes = {time_field: getattr(item, time_field) + shift,
               id_field: f"{getattr(item, id_field)}#{k}"}
    return dataclasses.replace(item, **changes)


def scale_time(items: Sequence[Item], factor: float, durations: bool = True) -> list[Item]:
    """Multiply arrival (or submit) times by ``factor`` (> 0), and lifetimes (or run times) too
    unless ``durations`` is False. Works on OnDemandRequest and Job lists; keeps their order."""
    _positive(factor, "factor")
    return [_scaled(item, factor, durations) for item in items]


def _scaled(item: Item, factor: float, durations: bool) -> Item:
    time_field, duration_field, _ = _FIELDS[type(item)]
    changes: dict[str, float | None] = {time_field: getattr(item, time_field) * factor}
    duration = getattr(item, duration_field)
    if durations and duration is not None:
        changes[duration_field] = duration * factor
    return dataclasses.replace(item, **changes)
