"""What every trace adapter shares (controller/sim/traces.py lists them): the records they yield
(OnDemandRequest, Job, DemandSeries), TraceError, and reading plain or gzipped text lines, CSV
tables with a header, and fields checked one by one, an error naming the file and the line.
The helpers with a leading underscore are the trace modules' own, not the simulator's.
"""
from __future__ import annotations

import csv
import gzip
import math
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

PathLike = str | os.PathLike[str]
FloatArray = npt.NDArray[np.float64]


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
    # SWF fields 12 and 13 (-1: unknown), what the simulator's tenants map jobs by
    # (controller/sim/tenants.py); not compared, so jobs equal as before tenants
    user: int = field(default=-1, compare=False)
    group: int = field(default=-1, compare=False)


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
