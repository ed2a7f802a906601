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
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from . import traces
from .traces import OnDemandRequest


def offered_vcpu_seconds(requests: Sequence[OnDemandRequest], run_s: float) -> float:
    return sum(r.vcpus * min(run_s if r.lifetime is None else r.lifetime, run_s) for r in requests)


def stretch_to_load(requests: Sequence[OnDemandRequest], run_s: float, load: float,
                    pool_vcpus: int) -> tuple[list[OnDemandRequest], float]:
    """The requests stretched and tiled to offer `load` of `pool_vcpus` over `run_s` seconds (see
    the module docstring); returns them with the tile period in seconds."""
    if not requests:
        return [], 0.0
    if not 0 < load:
        raise ValueError(f"load must be > 0, got {load!r}")
    ordered = sorted(requests, key=lambda r: r.at)
    origin = ordered[0].at
    shifted = [replace(r, at=r.at - origin) for r in ordered] if origin else ordered
    span = shifted[-1].at + (shifted[-1].at / max(len(shifted) - 1, 1) if len(shifted) > 1 else 1.0)
    period = offered_vcpu_seconds(shifted, run_s) / (load * pool_vcpus)
    if period <= 0:
        raise ValueError("the trace offers no work")
    stretched = traces.scale_time(shifted, period / span, durations=False)
    return traces.tile(stretched, period, run_s), period

