"""Plots of a simulation's outputs, as PNGs: what `python -m controller.sim --out DIR --plots` draws
from the files it wrote there (summary.json, vms.csv, timeline.csv).

- utilization.png: allocated vCPUs over the pool's, per timeline bucket, stacked by role;
- lost_work.png: backfill work lost so far as VM-level accounting counts it, in vCPU-hours (with
  the jobs' lost share beside it in task-level runs);
- wait_cdf.png: the share of placed on-demand requests that waited at most t for their VM (t on
  a log axis: most waits are a launch, a few are minutes);
- survival.png: the share of backfill VMs still running after t, by Kaplan-Meier
  (controller/sim/survival.py): a VM still running at the end is censored, not counted as ending.

Each plot's title names the run's setting (the --compare setting, or the policy and what else was
set). With --compare, compare.png in the --out directory sets the settings side by side: their
key figures as bars, and their wait CDFs, survival curves and lost work overlaid.

matplotlib is imported only when a plot is drawn, so the simulator itself loads without it.
"""
from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .survival import kaplan_meier

RUN_PLOTS = ("utilization.png", "lost_work.png", "wait_cdf.png", "survival.png")


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


def _read_run(run_dir: Path) -> tuple[dict[str, Any], list[dict[str, str]], list[dict[str, str]]]:
    return (json.loads((run_dir / "summary.json").read_text()), _read_csv(run_dir / "timeline.csv"),
            _read_csv(run_dir / "vms.csv"))


def plot_run(run_dir: Path, out_dir: Path | None = None) -> list[Path]:
    """Draw the four plots of the run in run_dir into out_dir (run_dir by default); returns the
    files written."""
    plt = _pyplot()
    run_dir = Path(run_dir)
    out_dir = Path(out_dir or run_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary, timeline, vms = _read_run(run_dir)
    title = _title(summary)
    written = []
    for name, draw in zip(RUN_PLOTS, (_utilization, _lost_work, _wait_cdf, _survival)):
        fig, ax = plt.subplots(figsize=(8, 4.5))
        draw(ax, summary=summary, timeline=timeline, vms=vms)
        ax.set_title(title, fontsize=9)
        fig.tight_layout()
        fig.savefig(out_dir / name, dpi=100)
        plt.close(fig)
        written.append(out_dir / name)
    return written


def setting_name(summary: dict[str, Any]) -> str:
    """The run's setting: the one the CLI ran it as (header.setting, e.g. a --compare setting),
    else its termination policy and what else differs from the defaults (reserves, work channel)."""
    header = summary["header"]
    if header.get("setting"):
        return header["setting"]
    parts = [header["backfill"]["termination_policy"]]
    reserves = header.get("reserve_settings") or {}
    if reserves.get("static_nodes"):
        parts.append(f"static={reserves['static_nodes']}")
    if reserves.get("predictive") not in (None, "off"):
        parts.append(f"predictive={reserves['predictive']}")
    if header["sim"].get("guest_work_channel"):
        parts.append("work_channel=true")
    return "+".join(parts)


def _title(summary: dict[str, Any]) -> str:
    sim, backfill, f = summary["header"]["sim"], summary["header"]["backfill"], summary["figures"]
    pool = ", ".join(f"{g['count']} x {g['cpus']}" for g in sim.get("pool") or ()) or \
        f"{sim['nodes']} nodes x {sim['node_cpus']}"
    work = "jobs" if "backfill_job_lost_share" in f else "VM-level work"
    return (f"{setting_name(summary)}: {pool} vCPUs, {f['simulated_days']:g} days, backfill "
            f"{'on' if backfill['enabled'] else 'off'}, {work}")


def _utilization(ax, summary: dict[str, Any], timeline: list[dict[str, str]], **_) -> None:
    days = [float(r["start_s"]) / 86400 for r in timeline]
    on_demand = [float(r["utilization_on_demand"]) for r in timeline]
    backfill = [float(r["utilization_backfill"]) for r in timeline]
    ax.stackplot(days, on_demand, backfill, labels=["on-demand", "backfill"], step="post")
    ax.set_ylim(0, 1)
    ax.set_xlabel("simulated days")
    ax.set_ylabel("allocated vCPUs / pool vCPUs")
    f = summary["figures"]
    ax.legend(loc="lower right", title=f"mean {f['utilization']:.1%} (on-demand {f['utilization_on_demand']:.1%}, "
                                       f"working {f['utilization_working']:.1%})")


def _lost_work(ax, timeline: list[dict[str, str]], summary: dict[str, Any], **_) -> None:
    ax.plot([float(r["start_s"]) / 86400 for r in timeline], [float(r["vm_level_lost_vcpu_hours"]) for r in timeline])
    ax.set_xlabel("simulated days")
    ax.set_ylabel("work lost so far, VM-level (vCPU-hours)")
    f = summary["figures"]
    share = f["vm_level_lost_share"]
    text = f"VM-level: a stop loses the VM's runtime x vCPUs; lost share {share:.2%}" if share is not None \
        else "no backfill work"
    if f.get("backfill_job_lost_share") is not None:
        text += f"\njobs: {f['backfill_job_lost_share']:.2%} of job time lost"
    ax.text(0.02, 0.85, text, transform=ax.transAxes, fontsize=8)


def _waits(vms: list[dict[str, str]]) -> list[float]:
    return sorted(float(r["wait_s"]) for r in vms if r["role"] == "on_demand" and r["wait_s"])


def _wait_curve(ax, waits: Sequence[float], label: str | None = None) -> None:
    # a log axis holds no 0: a wait of 0 (none seen: launches take seconds) is drawn at the least
    # positive one
    least = min((w for w in waits if w > 0), default=1.0)
    xs = [max(w, least) for w in waits]
    if xs:
        ax.step(xs, [(i + 1) / len(xs) for i in range(len(xs))], where="post", label=label)


def _log_seconds(ax) -> None:
    """A log time axis with plain labels (2, 5, 10, 20... s), not powers of ten: most waits span
    less than a decade."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _wait_cdf(ax, vms: list[dict[str, str]], **_) -> None:
    waits = _waits(vms)
    _wait_curve(ax, waits)
    _log_seconds(ax)
    ax.set_ylim(0, 1)
    ax.set_xlabel("on-demand wait, request to running (s, log scale)")
    ax.set_ylabel(f"share of the {len(waits)} placed requests")


def _backfill_lives(vms: list[dict[str, str]]) -> tuple[list[float], list[bool]]:
    """Each backfill VM's runtime in seconds and whether it ended (else it ran at the end: censored)."""
    rows = [r for r in vms if r["role"] == "backfill" and r["runtime_s"]]
    return [float(r["runtime_s"]) for r in rows], [bool(r["ended"]) for r in rows]


def _survival_curve(ax, vms: list[dict[str, str]], label: str | None = None) -> int:
    durations, ended = _backfill_lives(vms)
    if durations:
        times, survival = kaplan_meier(durations, ended)
        # the curve runs on to the longest life seen (a censored one past the last event)
        ax.step([t / 3600 for t in times] + [max(durations) / 3600], list(survival) + [survival[-1]],
                where="post", label=label)
    return len(durations) - sum(ended)


def _survival(ax, vms: list[dict[str, str]], **_) -> None:
    censored = _survival_curve(ax, vms)
    ax.set_ylim(0, 1)
    ax.set_xlabel("hours run")
    ax.set_ylabel("share of backfill VMs still running")
    ax.text(0.02, 0.05, f"Kaplan-Meier: the {censored} VMs still running at the end are censored",
            transform=ax.transAxes, fontsize=8)


# -- compare.png ------------------------------------------------------------------------------------

BARS = (("utilization", "utilization"), ("working", "utilization_working"), ("on-demand", "utilization_on_demand"))


def plot_compare(out_dir: Path, runs: Sequence[tuple[str, Path]]) -> Path:
    """compare.png in out_dir: the --compare runs (setting, its run directory) side by side: their
    utilizations and lost work as bars, and their wait CDFs, survival curves and VM-level lost
    work over time overlaid."""
    plt = _pyplot()
    read = [(name, *_read_run(Path(run_dir))) for name, run_dir in runs]
    fig, axes = plt.subplots(2, 2, figsize=(13, 8.5))
    _compare_bars(axes[0][0], read)
    for name, summary, timeline, vms in read:
        _wait_curve(axes[0][1], _waits(vms), name)
        _survival_curve(axes[1][0], vms, name)
        axes[1][1].plot([float(r["start_s"]) / 86400 for r in timeline],
                        [float(r["vm_level_lost_vcpu_hours"]) for r in timeline], label=name)
    ax = axes[0][1]
    _log_seconds(ax)
    ax.set_ylim(0, 1)
    ax.set_xlabel("on-demand wait, request to running (s, log scale)")
    ax.set_ylabel("share of placed requests")
    ax = axes[1][0]
    ax.set_ylim(0, 1)
    ax.set_xlabel("hours run")
    ax.set_ylabel("backfill VMs still running (Kaplan-Meier)")
    ax = axes[1][1]
    ax.set_xlabel("simulated days")
    ax.set_ylabel("work lost so far, VM-level (vCPU-hours)")
    for ax in (axes[0][1], axes[1][0], axes[1][1]):
        ax.legend(fontsize=8)
    first = read[0][1]
    fig.suptitle(_title(first).split(": ", 1)[1] + " — " + ", ".join(name for name, *_ in read), fontsize=10)
    fig.tight_layout()
    path = Path(out_dir) / "compare.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _compare_bars(ax, read: list) -> None:
    """Per setting, its utilizations and its lost work (the jobs' share in task-level runs, else
    VM-level), in percent."""
    bars = list(BARS)
    jobs = all(summary["figures"].get("backfill_job_lost_share") is not None for _, summary, *_ in read)
    bars.append(("job time lost", "backfill_job_lost_share") if jobs else ("VM-level lost", "vm_level_lost_share"))
    width = 0.8 / len(read)
    for k, (name, summary, *_) in enumerate(read):
        values = [100 * (summary["figures"].get(key) or 0.0) for _, key in bars]
        positions = [i + (k - (len(read) - 1) / 2) * width for i in range(len(bars))]
        drawn = ax.bar(positions, values, width, label=name)
        ax.bar_label(drawn, fmt="%.1f", fontsize=7)
    ax.set_xticks(range(len(bars)), [label for label, _ in bars])
    ax.set_ylabel("%")
    ax.legend(fontsize=8)
