"""Plots of a simulation's outputs (summary.json and vms.csv from `python -m controller.sim --out`).

matplotlib is not a dependency of Gleaner: plotting asks for it only when called, and says so
clearly when it is missing. Nothing else in the simulator imports this module.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path


class PlotsUnavailable(RuntimeError):
    pass


def _pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PlotsUnavailable("plotting needs matplotlib, which Gleaner does not install: "
                               "`pip install matplotlib` in this environment first") from exc
    return plt


def plot_run(run_dir: Path, out_dir: Path | None = None) -> list[Path]:
    """Backfill VM survival (share still running after t) and the utilization split, as PNGs in
    out_dir (run_dir by default); returns the files written."""
    plt = _pyplot()
    run_dir = Path(run_dir)
    out_dir = Path(out_dir or run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    with open(run_dir / "vms.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["role"] == "backfill" and r["launched"]]
    end = summary["figures"]["simulated_days"] * 86400
    runtimes = sorted((float(r["ended"]) if r["ended"] else end) - float(r["launched"]) for r in rows)
    written = []
    fig, ax = plt.subplots()
    if runtimes:
        n = len(runtimes)
        ax.step([t / 3600 for t in runtimes], [1 - (i + 1) / n for i in range(n)], where="post")
    ax.set_xlabel("hours run")
    ax.set_ylabel("share of backfill VMs still running")
    ax.set_title("backfill VM survival (VMs still running at the end counted as ended then)")
    path = out_dir / "survival.png"
    fig.savefig(path)
    written.append(path)
    fig, ax = plt.subplots()
    f = summary["figures"]
    ax.bar(["on-demand", "backfill"], [f["utilization_on_demand"], f["utilization_backfill"]])
    ax.set_ylim(0, 1)
    ax.set_ylabel("allocated vCPUs / total vCPUs, over time")
    path = out_dir / "utilization.png"
    fig.savefig(path)
    written.append(path)
    plt.close("all")
    return written
