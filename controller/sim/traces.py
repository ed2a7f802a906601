"""Trace adapters: public workload traces read into plain Python data for the simulator.

Pure Python and numpy. Every adapter takes a path to a plain or gzipped file (gzip is recognised
by its magic bytes, not by the name) and returns a list sorted by time (stable: ties keep file
order). Times are seconds, as floats. Malformed input raises TraceError, a ValueError whose
message starts with ``FILE:LINE:`` (for a member of a tar archive, ``ARCHIVE[MEMBER]:LINE:``).

What each adapter yields:

- ``azure_requests``: Azure Packing 2020 VM requests (``vm_entry_list_5000.csv.gz``) as
  OnDemandRequest; ``priority=0`` on-demand VMs, ``priority=1`` the trace's own low-priority VMs.
- ``swf_read`` / ``swf_jobs`` / ``swf_stats``: Standard Workload Format job traces as Job (backfill
  work), with counts of what was skipped; ``swf_requests``: the same jobs as on-demand VMs.
- ``bitbrains_series``: Bitbrains per-VM CPU series (tar.gz of per-VM CSVs) as DemandSeries.
- ``alibaba_series``: Alibaba 2018 ``machine_usage.csv`` as DemandSeries, one per machine.
- ``csv_requests``: Gleaner's own on-demand request format (below).
- ``pool_groups``: a pool of nodes of several sizes (below), as NodeGroup.
- ``digest``: sha256 of a file's bytes, for the simulator's summary header.
- ``tile``, ``tile_jobs``, ``scale_time``: stretch a short or small trace to a longer run.

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

import csv
import dataclasses
import gzip
import hashlib
import itertools
import math
import os
import re
import tarfile
from collections import Counter
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
import numpy.typing as npt

PathLike = str | os.PathLike[str]
FloatArray = npt.NDArray[np.float64]

DAY_S = 86400.0
AZURE_MACHINE_VCPUS = 104            # inference: core fractions are multiples of 1/104
AZURE_MACHINE_MEMORY_MIB = 576_000   # inference: 562.5 GiB, memory fractions are multiples of 1/2250
SWF_FIELDS = 18
SWF_MEMORY_MIB_PER_VCPU = 4096
BITBRAINS_CPU_PERCENT = 4            # column index of "CPU usage [%]"


class TraceError(ValueError):
    """A trace file is malformed. The message names the file and the line."""


class _Bad(Exception):
    """A field is malformed; turned into a TraceError by the line that was being read."""


@dataclass(frozen=True)
class OnDemandRequest:
    """An on-demand VM request. ``at`` and ``lifetime`` in seconds; lifetime None = to the end."""
    at: float
    vcpus: int
    memory_mib: int
    lifetime: float | None
    owner: str
    request_id: str


@dataclass(frozen=True)
class Job:
    """An HTC/HPC job a backfill VM could run: submit time and run time in seconds."""
    submit: float
    runtime: float
    procs: int
    job_id: str
    queue: int


@dataclass(frozen=True, eq=False)
class DemandSeries:
    """Foreground CPU demand of one node: ``cpu[i]`` (fraction 0..1 of the node's CPUs) from
    ``times[i]`` (seconds, non-decreasing). The arrays are copied and made read-only."""
    name: str
    times: FloatArray
    cpu: FloatArray

    def __post_init__(self) -> None:
        times = np.array(self.times, dtype=np.float64)
        cpu = np.array(self.cpu, dtype=np.float64)
        _check_series(self.name, times, cpu)
        times.flags.writeable = False
        cpu.flags.writeable = False
        object.__setattr__(self, "times", times)
        object.__setattr__(self, "cpu", cpu)


def _check_series(name: str, times: FloatArray, cpu: FloatArray) -> None:
    if times.ndim != 1 or times.shape != cpu.shape:
        raise ValueError(f"series {name}: times and cpu must be 1-D arrays of the same length")
    if not (np.all(np.isfinite(times)) and np.all(np.isfinite(cpu))):
        raise ValueError(f"series {name}: times and cpu must be finite")
    if np.any(np.diff(times) < 0):
        raise ValueError(f"series {name}: times must be non-decreasing")
    if cpu.size and (cpu.min() < 0 or cpu.max() > 1):
        raise ValueError(f"series {name}: cpu must be within 0..1")


@dataclass(frozen=True)
class SwfStats:
    """What reading an SWF file found. ``records`` counts job lines read (all of them unless a
    limit stopped the read early); each record is kept or counted under exactly one reason."""
    records: int
    kept: int
    skipped_runtime: int   # run time <= 0 or unknown (-1)
    skipped_procs: int     # neither allocated nor requested procs known (> 0)
    other_queue: int       # left out by the ``queues`` filter
    max_procs: int | None  # MaxProcs (or MaxNodes) from the header, None if absent

    @property
    def skipped(self) -> int:
        return self.skipped_runtime + self.skipped_procs


@dataclass(frozen=True)
class SwfTrace:
    jobs: list[Job]
    stats: SwfStats
    header: dict[str, str]   # "; Key: value" header lines, first occurrence of each key


# ---------------------------------------------------------------- reading lines and fields

def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


def _lines(path: PathLike) -> Iterator[tuple[int, str]]:
    """(line number from 1, line without its end-of-line) of a plain or gzipped text file."""
    path = Path(path)
    opener = gzip.open if _is_gzip(path) else open
    lineno = 0
    try:
        with opener(path, "rt", encoding="utf-8", newline="") as f:
            for lineno, line in enumerate(f, 1):
                yield lineno, line.rstrip("\r\n")
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise TraceError(f"{path}:{lineno + 1}: cannot read: {e}") from e


@contextmanager
def _located(where: object, lineno: int) -> Iterator[None]:
    try:
        yield
    except _Bad as e:
        raise TraceError(f"{where}:{lineno}: {e}") from None


def _float(text: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _Bad(f"{name}: expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise _Bad(f"{name}: expected a finite number, got {text!r}")
    return value


def _int(text: str, name: str) -> int:
    value = _float(text, name)
    if value != int(value):
        raise _Bad(f"{name}: expected an integer, got {text!r}")
    return int(value)


def _at_least(value: float, low: float, name: str) -> None:
    if value < low:
        raise _Bad(f"{name}: must be >= {low:g}, got {value:g}")


def _check_limit(limit: int | None) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be None or an integer >= 0, got {limit!r}")


def _positive(value: float, name: str) -> None:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def _round(value: float) -> int:
    """Round half up (Python's round() rounds half to even)."""
    return math.floor(value + 0.5)


def _natural(name: str) -> tuple[str | int, ...]:
    """Sort key putting "m_2" before "m_10" and "2" before "10"."""
    parts = re.split(r"(\d+)", name)
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts))


def _csv_table(path: PathLike, required: Sequence[str], optional: Sequence[str] = (),
               extra_ok: bool = False) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, {column: stripped field}) per data row of a CSV file with a header."""
    header: list[str] | None = None
    for lineno, line in _lines(path):
        if not line.strip() or line.startswith("#"):
            continue
        fields = [f.strip() for f in next(csv.reader([line]))]
        if header is None:
            with _located(path, lineno):
                _check_header(fields, required, optional, extra_ok)
            header = fields
            continue
        if len(fields) != len(header):
            raise TraceError(f"{path}:{lineno}: expected {len(header)} fields "
                             f"({','.join(header)}), got {len(fields)}")
        yield lineno, dict(zip(header, fields))
    if header is None:
        raise TraceError(f"{path}:1: no header line (expected columns {','.join(required)})")


def _check_header(names: list[str], required: Sequence[str], optional: Sequence[str],
                  extra_ok: bool) -> None:
    missing = [n for n in required if n not in names]
    if missing:
        raise _Bad(f"header lacks column(s) {', '.join(missing)}; got {','.join(names)}")
    unknown = [n for n in names if n not in required and n not in optional]
    if unknown and not extra_ok:
        raise _Bad(f"unknown column(s) {', '.join(unknown)} in header")
    if len(set(names)) != len(names):
        raise _Bad(f"repeated column in header {','.join(names)}")


def _by_time(requests: list[OnDemandRequest]) -> list[OnDemandRequest]:
    return sorted(requests, key=lambda r: r.at)


# ---------------------------------------------------------------- Azure Packing 2020

def azure_requests(path: PathLike, machine_vcpus: int = AZURE_MACHINE_VCPUS,
                   machine_memory_mib: int = AZURE_MACHINE_MEMORY_MIB, priority: int | None = 0,
                   limit: int | None = None) -> list[OnDemandRequest]:
    """VM requests of the Azure Packing 2020 trace (``vmId,vmTypeId,priority,starttime,endtime,
    core,memory,machineId``; extra or reordered columns are fine).

    - ``priority``: keep rows of this priority (0 = on-demand, 1 = the trace's low-priority,
      evictable VMs); None keeps both.
    - ``at`` = starttime x 86400 and ``lifetime`` = (endtime - starttime) x 86400; an empty
      endtime (alive at the trace's 90-day cap) gives lifetime None.
    - ``vcpus`` = core x ``machine_vcpus`` rounded half up, at least 1; ``memory_mib`` = memory x
      ``machine_memory_mib`` rounded, at least 1. The defaults are inferences, not published
      figures: core fractions are multiples of 1/104 (fractional-core types such as 0.35/104 become
      1 vCPU), and memory fractions are multiples of 1/2250, which at 562.5 GiB (576,000 MiB) map
      exactly onto Azure sizes (1 vCPU/0.75 GiB, 1/1.75, 1/3.5, 2/7, 8/28, 16/56 GiB ...).
    - ``owner`` is ``azure-p<priority>``, ``request_id`` the vmId.
    - ``limit``: at most this many requests, the first ones of that priority in file order (the
      file is ordered by starttime).
    """
    _check_limit(limit)
    out: list[OnDemandRequest] = []
    rows = _csv_table(path, ("vmId", "priority", "starttime", "endtime", "core", "memory"),
                      extra_ok=True)
    for lineno, row in rows:
        if limit is not None and len(out) >= limit:
            break
        with _located(path, lineno):
            row_priority, request = _azure_request(row, machine_vcpus, machine_memory_mib)
        if priority is None or row_priority == priority:
            out.append(request)
    return _by_time(out)


def _azure_request(row: dict[str, str], machine_vcpus: int,
                   machine_memory_mib: int) -> tuple[int, OnDemandRequest]:
    priority = _int(row["priority"], "priority")
    start = _float(row["starttime"], "starttime")
    end = None if row["endtime"] == "" else _float(row["endtime"], "endtime")
    if end is not None and end < start:
        raise _Bad(f"endtime {end!r} is before starttime {start!r}")
    return priority, OnDemandRequest(
        at=start * DAY_S,
        vcpus=max(1, _round(_fraction(row["core"], "core") * machine_vcpus)),
        memory_mib=max(1, _round(_fraction(row["memory"], "memory") * machine_memory_mib)),
        lifetime=None if end is None else (end - start) * DAY_S,
        owner=f"azure-p{priority}",
        request_id=row["vmId"])


def _fraction(text: str, name: str) -> float:
    value = _float(text, name)
    if not 0 < value <= 1:
        raise _Bad(f"{name}: expected a machine fraction in (0, 1], got {text!r}")
    return value


# ---------------------------------------------------------------- SWF

def swf_read(path: PathLike, queues: Collection[int] | None = None,
             limit: int | None = None) -> SwfTrace:
    """Jobs of a Standard Workload Format file, with counts of what was skipped.

    Lines starting with ';' are header comments; every other non-blank line must have 18
    whitespace-separated numeric fields (field 6, average CPU time, is often a decimal).
    ``submit`` (field 2) is kept as in the file: seconds from the trace's own start.
    ``procs`` is the allocated procs (field 5), or the requested procs (field 8) when the
    allocated count is unknown (-1) or 0. Jobs with run time (field 4) <= 0 are skipped, then
    jobs whose procs are still <= 0; ``queues`` keeps only jobs of those queues (field 15).
    ``limit`` stops reading after that many kept jobs (SWF files are ordered by submit time).
    """
    _check_limit(limit)
    wanted = None if queues is None else frozenset(queues)
    counts: Counter[str] = Counter()
    header: dict[str, str] = {}
    jobs: list[Job] = []
    for lineno, line in _lines(path):
        text = line.strip()
        if text.startswith(";"):
            _swf_header_entry(text, header)
            continue
        if not text:
            continue
        if limit is not None and len(jobs) >= limit:
            break
        with _located(path, lineno):
            job = _swf_job(text)
        verdict = _swf_verdict(job, wanted)
        counts[verdict] += 1
        if verdict == "kept":
            jobs.append(job)
    jobs.sort(key=lambda j: j.submit)
    return SwfTrace(jobs, _swf_stats(counts, header), header)


def _swf_header_entry(text: str, header: dict[str, str]) -> None:
    key, colon, value = text.lstrip(";").partition(":")
    key = key.strip()
    if colon and key and " " not in key:
        header.setdefault(key, value.strip())


def _swf_job(text: str) -> Job:
    fields = text.split()
    if len(fields) != SWF_FIELDS:
        raise _Bad(f"expected {SWF_FIELDS} SWF fields, got {len(fields)}")
    procs = _int(fields[4], "allocated procs (field 5)")
    if procs <= 0:
        procs = _int(fields[7], "requested procs (field 8)")
    return Job(submit=_float(fields[1], "submit time (field 2)"),
               runtime=_float(fields[3], "run time (field 4)"),
               procs=procs, job_id=fields[0], queue=_int(fields[14], "queue (field 15)"))


def _swf_verdict(job: Job, queues: frozenset[int] | None) -> str:
    if job.runtime <= 0:
        return "skipped_runtime"
    if job.procs <= 0:
        return "skipped_procs"
    if queues is not None and job.queue not in queues:
        return "other_queue"
    return "kept"


def _swf_stats(counts: Counter[str], header: dict[str, str]) -> SwfStats:
    size = header.get("MaxProcs") or header.get("MaxNodes")
    max_procs = int(size) if size and size.isdigit() and int(size) > 0 else None
    return SwfStats(records=sum(counts.values()), kept=counts["kept"],
                    skipped_runtime=counts["skipped_runtime"], skipped_procs=counts["skipped_procs"],
                    other_queue=counts["other_queue"], max_procs=max_procs)


def swf_jobs(path: PathLike, queues: Collection[int] | None = None,
             limit: int | None = None) -> list[Job]:
    """The kept jobs of ``swf_read`` (see there), sorted by submit time."""
    return swf_read(path, queues, limit).jobs


def swf_stats(path: PathLike, queues: Collection[int] | None = None) -> SwfStats:
    """Counts of ``swf_read`` over the whole file: records, kept, skipped and why."""
    return swf_read(path, queues).stats


def swf_requests(path: PathLike, memory_mib_per_vcpu: int = SWF_MEMORY_MIB_PER_VCPU,
                 queues: Collection[int] | None = None, limit: int | None = None,
                 owner: str = "swf") -> list[OnDemandRequest]:
    """An SWF job trace read as on-demand load: each kept job (see ``swf_read``) is one VM of
    ``procs`` vCPUs and ``procs x memory_mib_per_vcpu`` MiB arriving at its submit time and
    living for its run time; ``request_id`` is the job id."""
    if memory_mib_per_vcpu < 1:
        raise ValueError(f"memory_mib_per_vcpu must be >= 1, got {memory_mib_per_vcpu!r}")
    return [OnDemandRequest(at=j.submit, vcpus=j.procs, memory_mib=j.procs * memory_mib_per_vcpu,
                            lifetime=j.runtime, owner=owner, request_id=j.job_id)
            for j in swf_jobs(path, queues, limit)]


# ---------------------------------------------------------------- CPU series

def _series(name: str, times: list[float], cpu: list[float]) -> DemandSeries:
    t = np.asarray(times, dtype=np.float64)
    order = np.argsort(t, kind="stable")
    return DemandSeries(name, t[order], np.asarray(cpu, dtype=np.float64)[order])


def _cpu_fraction(text: str, name: str) -> float:
    """A CPU percentage as a fraction; values above 100 % (Bitbrains has some) are capped at 1."""
    percent = _float(text, name)
    _at_least(percent, 0, name)
    return min(percent / 100.0, 1.0)


def bitbrains_series(path: PathLike, limit: int | None = None) -> list[DemandSeries]:
    """Per-VM CPU demand from a Bitbrains (GWA-T-12) tar(.gz) of per-VM CSV files.

    Each ``.csv`` member is one VM, named by its file stem ("1", "2", ...). Fields are separated
    by ';' plus a TAB; the first column is a Unix timestamp in **seconds** (despite its "[ms]"
    header) and ``cpu`` = "CPU usage [%]" / 100, capped at 1 (the trace has samples above 100 %).
    Note this is a fraction of the VM's own provisioned CPUs. Times are seconds from the earliest
    timestamp of any VM in the archive. Members without samples are left out. The list is in
    natural name order ("2" before "10"); ``limit`` keeps the first that many.
    """
    _check_limit(limit)
    members = _bitbrains_members(path)
    if not members:
        raise TraceError(f"{path}: no per-VM .csv file with samples in the archive")
    origin = min(times[0] for times, _ in members.values())
    names = sorted(members, key=_natural)[:limit]
    return [_series(n, [t - origin for t in members[n][0]], members[n][1]) for n in names]


def _bitbrains_members(path: PathLike) -> dict[str, tuple[list[float], list[float]]]:
    out: dict[str, tuple[list[float], list[float]]] = {}
    try:
        with tarfile.open(path) as archive:
            for member in archive:
                if member.isfile() and member.name.endswith(".csv"):
                    data = archive.extractfile(member).read()  # type: ignore[union-attr]
                    _add_bitbrains_vm(out, f"{path}[{member.name}]", member.name, data)
    except (tarfile.TarError, OSError, EOFError) as e:
        raise TraceError(f"{path}: cannot read the tar archive: {e}") from e
    return out


def _add_bitbrains_vm(out: dict[str, tuple[list[float], list[float]]], where: str,
                      member: str, data: bytes) -> None:
    name = Path(member).stem
    if name in out:
        raise TraceError(f"{where}: a second file for VM {name}")
    times, cpu = _bitbrains_samples(where, data)
    if times:
        out[name] = (times, cpu)


def _bitbrains_samples(where: str, data: bytes) -> tuple[list[float], list[float]]:
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise TraceError(f"{where}: not UTF-8 text: {e}") from None
    if not lines or not lines[0].startswith("Timestamp"):
        raise TraceError(f"{where}:1: expected the Bitbrains header 'Timestamp [ms];\\tCPU cores;...'")
    times: list[float] = []
    cpu: list[float] = []
    for lineno, line in enumerate(lines[1:], 2):
        if line.strip():
            with _located(where, lineno):
                t, c = _bitbrains_sample(line)
            times.append(t)
            cpu.append(c)
    return times, cpu


def _bitbrains_sample(line: str) -> tuple[float, float]:
    fields = line.split(";")
    if len(fields) <= BITBRAINS_CPU_PERCENT:
        raise _Bad(f"expected at least {BITBRAINS_CPU_PERCENT + 1} ';'-separated fields, "
                   f"got {len(fields)}")
    return (_float(fields[0].strip(), "Timestamp"),
            _cpu_fraction(fields[BITBRAINS_CPU_PERCENT].strip(), "CPU usage [%]"))


def alibaba_series(path: PathLike, limit: int | None = None) -> list[DemandSeries]:
    """Per-machine CPU demand from Alibaba cluster-trace-v2018 ``machine_usage.csv`` (no header;
    ``machine_id,time_stamp,cpu_util_percent,...``). Times are kept as in the file (seconds from
    the trace start) and sorted per machine (samples are irregular); ``cpu`` = percent / 100,
    capped at 1. The list is in natural machine-id order; ``limit`` keeps the first that many.
    """
    _check_limit(limit)
    samples: dict[str, tuple[list[float], list[float]]] = {}
    for lineno, line in _lines(path):
        if line.strip():
            with _located(path, lineno):
                machine, t, c = _alibaba_sample(line)
            times, cpu = samples.setdefault(machine, ([], []))
            times.append(t)
            cpu.append(c)
    names = sorted(samples, key=_natural)[:limit]
    return [_series(n, *samples[n]) for n in names]


def _alibaba_sample(line: str) -> tuple[str, float, float]:
    fields = line.split(",")
    if len(fields) < 3:
        raise _Bad(f"expected machine_id,time_stamp,cpu_util_percent,..., got {len(fields)} field(s)")
    machine = fields[0].strip()
    if not machine:
        raise _Bad("empty machine_id")
    return (machine, _float(fields[1], "time_stamp"),
            _cpu_fraction(fields[2], "cpu_util_percent"))


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
