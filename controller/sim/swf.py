"""Standard Workload Format job traces (controller/sim/traces.py re-exports them): the jobs as
Job (backfill work, controller/sim/jobs.py) with counts of what was skipped, or the same jobs as
on-demand VMs.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass

from .trace_base import Job, OnDemandRequest, PathLike, _Bad, _check_limit, _float, _int, _lines, _located

SWF_FIELDS = 18
SWF_MEMORY_MIB_PER_VCPU = 4096


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
               procs=procs, job_id=fields[0], queue=_int(fields[14], "queue (field 15)"),
               user=_int(fields[11], "user (field 12)"), group=_int(fields[12], "group (field 13)"))


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
