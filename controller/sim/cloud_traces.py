"""Cloud VM traces (controller/sim/traces.py re-exports them): Azure Packing 2020 VM requests as
on-demand requests, and the per-VM or per-machine CPU demand of Bitbrains (GWA-T-12) and Alibaba
cluster-trace-v2018 as demand series.
"""
from __future__ import annotations

import math
import re
import tarfile
from pathlib import Path

import numpy as np

from .trace_base import (DemandSeries, OnDemandRequest, PathLike, TraceError, _at_least, _Bad, _by_time,
                         _check_limit, _csv_table, _float, _int, _lines, _located)

DAY_S = 86400.0
AZURE_MACHINE_VCPUS = 104            # inference: core fractions are multiples of 1/104
AZURE_MACHINE_MEMORY_MIB = 576_000   # inference: 562.5 GiB, memory fractions are multiples of 1/2250
BITBRAINS_CPU_PERCENT = 4            # column index of "CPU usage [%]"


def _round(value: float) -> int:
    """Round half up (Python's round() rounds half to even)."""
    return math.floor(value + 0.5)


def _natural(name: str) -> tuple[str | int, ...]:
    """Sort key putting "m_2" before "m_10" and "2" before "10"."""
    parts = re.split(r"(\d+)", name)
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts))


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
