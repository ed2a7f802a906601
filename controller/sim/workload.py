"""Shaping a request trace to a run: how a short trace fills a longer simulation.

The Azure Packing 2020 sample is a burst: 3,762 on-demand VMs arriving within 15.6 minutes, many
of them living for hours or days. Tiled as it is (a copy every 15.6 minutes) it would offer a
pool of any size far more than it holds. So the trace is stretched to an offered load instead:

    offered vCPU-seconds of one copy  W = sum(vcpus x min(lifetime, run)), lifetime None = the run
    period                            P = W / (load x pool vCPUs)

Arrival times are scaled (lifetimes kept) so the copy's arrivals spread over P (its span being the
last arrival plus one mean gap), and the copy is tiled every P until the run ends. In the long run
on-demand VMs then ask for `load` of the pool's vCPUs on average (less at the start, while the
long-lived VMs of the first copies build up; more at peaks: arrivals keep the trace's own shape).

A job trace for task-level backfill (controller/sim/jobs.py) is shaped the same way (submit
times, procs and run times in place of arrivals, vCPUs and lifetimes), so that backfill has as
much work offered as the run needs, as Nimbus' Condor queue had.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TypeVar

from . import traces
from .traces import Job, OnDemandRequest

Item = TypeVar("Item", OnDemandRequest, Job)


def _arrival_field(item: OnDemandRequest | Job) -> str:
    return "at" if isinstance(item, OnDemandRequest) else "submit"


def _offered(item: OnDemandRequest | Job, run_s: float) -> float:
    """vCPU-seconds one request (or job) asks for within a run of `run_s` seconds."""
    if isinstance(item, OnDemandRequest):
        return item.vcpus * min(run_s if item.lifetime is None else item.lifetime, run_s)
    return item.procs * min(item.runtime, run_s)


def offered_vcpu_seconds(items: Sequence[OnDemandRequest | Job], run_s: float) -> float:
    return sum(_offered(i, run_s) for i in items)


def stretch_to_load(items: Sequence[Item], run_s: float, load: float, pool_vcpus: int) -> tuple[list[Item], float]:
    """The requests (or jobs) stretched and tiled to offer `load` of `pool_vcpus` over `run_s`
    seconds (see the module docstring); returns them with the tile period in seconds."""
    if not items:
        return [], 0.0
    if not 0 < load:
        raise ValueError(f"load must be > 0, got {load!r}")
    field = _arrival_field(items[0])
    ordered = sorted(items, key=lambda i: getattr(i, field))
    origin = getattr(ordered[0], field)
    shifted = [replace(i, **{field: getattr(i, field) - origin}) for i in ordered] if origin else ordered
    last = getattr(shifted[-1], field)
    span = last + (last / max(len(shifted) - 1, 1) if len(shifted) > 1 else 1.0)
    period = offered_vcpu_seconds(shifted, run_s) / (load * pool_vcpus)
    if period <= 0:
        raise ValueError("the trace offers no work")
    stretched = traces.scale_time(shifted, period / span, durations=False)
    tile = traces.tile if field == "at" else traces.tile_jobs
    return tile(stretched, period, run_s), period
