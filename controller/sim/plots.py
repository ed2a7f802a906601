"""Plots of a simulation's outputs, as PNGs: what `python -m controller.sim --out DIR --plots` draws
from the files it wrote there (summary.json, vms.csv, timeline.csv).

- utilization.png: allocated vCPUs over the pool's, per timeline bucket, stacked by role;
- lost_work.png: backfill work lost to preemption so far, in vCPU-hours;
- wait_cdf.png: the share of placed on-demand requests that waited at most t for their VM;
- survival.png: the share of backfill VMs still running after t.

matplotlib is imported only when a plot is drawn, so the simulator itself loads without it.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any


class PlotsUnavailable(RuntimeError):
    pass


def _pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PlotsUnavailable("plotting needs matplotlib, a dependency of Gleaner (pyproject.toml): install the "
                               "project into this environment again (scripts/setup.sh does)") from exc
    return plt


def _read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def plot_run(run_dir: Path, out_dir: Path | None = None) -> list[Path]:
    """Draw the four plots of the run in run_dir into out_dir (run_dir by default); returns the
    files written."""
    plt = _pyplot()
    run_dir = Path(run_dir)
    out_dir = Path(out_dir or run_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = json.loads((run_dir / "summary.json").read_text())
    timeline = _read_csv(run_dir / "timeline.csv")
    vms = _read_csv(run_dir / "vms.csv")
    title = _title(summary)
    written = []
    for name, draw in (("utilization.png", _utilization), ("lost_work.png", _lost_work),
                       ("wait_cdf.png", _wait_cdf), ("survival.png", _survival)):
        fig, ax = plt.subplots(figsize=(8, 4.5))
        draw(ax, summary=summary, timeline=timeline, vms=vms)
        ax.set_title(title, fontsize=9)
        fig.tight_layout()
        fig.savefig(out_dir / name, dpi=100)
        plt.close(fig)
        written.append(out_dir / name)
    return written


def _title(summary: dict[str, Any]) -> str:
    sim, backfill, f = summary["header"]["sim"], summary["header"]["backfill"], summary["figures"]
    pool = ", ".join(f"{g['count']} x {g['cpus']}" for g in sim.get("pool") or ()) or \
        f"{sim['nodes']} nodes x {sim['node_cpus']}"
    return (f"{pool} vCPUs, {f['simulated_days']:g} days, backfill "
            f"{'on' if backfill['enabled'] else 'off'} ({backfill['termination_policy']})")


def _utilization(ax, summary: dict[str, Any], timeline: list[dict[str, str]], **_) -> None:
    days = [float(r["start_s"]) / 86400 for r in timeline]
    on_demand = [float(r["utilization_on_demand"]) for r in timeline]
    backfill = [float(r["utilization_backfill"]) for r in timeline]
    ax.stackplot(days, on_demand, backfill, labels=["on-demand", "backfill"], step="post")
    ax.set_ylim(0, 1)
    ax.set_xlabel("simulated days")
    ax.set_ylabel("allocated vCPUs / pool vCPUs")
    f = summary["figures"]
    ax.legend(loc="lower right", title=f"mean {f['utilization']:.1%} (on-demand {f['utilization_on_demand']:.1%})")


def _lost_work(ax, timeline: list[dict[str, str]], summary: dict[str, Any], **_) -> None:
    ax.plot([float(r["start_s"]) / 86400 for r in timeline], [float(r["vm_level_lost_vcpu_hours"]) for r in timeline])
    ax.set_xlabel("simulated days")
    ax.set_ylabel("backfill work lost so far (vCPU-hours)")
    share = summary["figures"]["vm_level_lost_share"]
    ax.text(0.02, 0.92, f"lost share of backfill work: {share:.2%}" if share is not None else "no backfill work",
            transform=ax.transAxes)


def _wait_cdf(ax, vms: list[dict[str, str]], **_) -> None:
    waits = sorted(float(r["wait_s"]) for r in vms if r["role"] == "on_demand" and r["wait_s"])
    if waits:
        ax.step(waits, [(i + 1) / len(waits) for i in range(len(waits))], where="post")
    ax.set_ylim(0, 1)
    ax.set_xlabel("on-demand wait, request to running (s)")
    ax.set_ylabel(f"share of the {len(waits)} placed requests")


def _survival(ax, summary: dict[str, Any], vms: list[dict[str, str]], **_) -> None:
    runtimes = sorted(float(r["runtime_s"]) for r in vms if r["role"] == "backfill" and r["runtime_s"])
    if runtimes:
        n = len(runtimes)
        ax.step([t / 3600 for t in runtimes], [1 - (i + 1) / n for i in range(n)], where="post")
    ax.set_ylim(0, 1)
    ax.set_xlabel("hours run")
    ax.set_ylabel("share of backfill VMs still running")
    ax.text(0.02, 0.05, "VMs still running at the end count as ending then", transform=ax.transAxes, fontsize=8)
