"""Why backfill fills a node or not (issue 27): the launcher's checks for one node, in the order
it makes them, each answered with the figures that decided it. Pure: the ledger gathers the facts
(Ledger.fill_facts); `gleanctl explain NODE` and the controller's log read the answer."""
from __future__ import annotations

from dataclasses import dataclass

from .backfill_plan import fitting_count, vms_by_cpu
from .records import Size


@dataclass(frozen=True)
class FillFacts:
    node_id: str
    state: str                       # up | suspect | down
    enabled: bool                    # backfill enabled at all
    vm: Size                         # one backfill VM
    selected: bool                   # among the volunteers (RHIC's selection)
    reserved: bool                   # kept free of backfill by a reserve (per node, or Balancer's)
    unable: str                      # why it cannot boot the backfill VM ("" if it can)
    free: Size                       # capacity less its reserve and every VM on it
    backfill_vcpus: int              # vCPUs its backfill VMs hold
    use_prediction: bool
    productivity: float | None       # P: its CPUs less the predicted foreground (None: not known yet)
    predicted_foreground: float | None
    on_demand_cpu: float             # its last report: CPU its on-demand VMs used ...
    host_other_cpu: float            # ... and the host's own load (foreground too)
    backoff_left_s: float            # launches paused after failures (0: none)
    budget_left: int | None          # max_instances less the backfill VMs now (None: no limit)
    lane_busy: bool = False          # its agent calls are backed up


@dataclass(frozen=True)
class FillAnswer:
    fills: bool                      # the next fill would launch (or resume) a VM here
    vms: int                         # how many
    reasons: tuple[str, ...]         # why not, or what bounds it, first the deciding one
    code: str = "fills"              # the deciding reason in a word: disabled, down, reserved, unable,
                                     # not_selected, backoff, busy, full, cpu, max_instances (or fills)
    node_id: str = ""

    @property
    def first(self) -> str:
        return self.reasons[0] if self.reasons else ""


def explain_fill(f: FillFacts) -> FillAnswer:
    """What the launcher would do with this node now, and why."""
    code, blocked = _blocked(f)
    if blocked:
        return FillAnswer(False, 0, (blocked,), code, f.node_id)
    vms = fitting_count(f.free, f.vm)
    reasons, codes = [], []
    if vms <= 0:
        codes.append("full")
        reasons.append(f"full: {f.free.vcpus} vCPUs and {f.free.memory_mib} MiB free, less than one backfill VM "
                       f"({f.vm.vcpus} vCPUs, {f.vm.memory_mib} MiB)")
    if f.use_prediction and vms > 0:
        by_p = vms_by_cpu(f.productivity or 0.0, f.backfill_vcpus, f.vm.vcpus)
        if by_p < vms:
            vms = by_p
            codes.append("cpu")
            reasons.append(_productivity_bound(f, by_p))
    if f.budget_left is not None and f.budget_left < vms:
        vms = max(f.budget_left, 0)
        codes.append("max_instances")
        reasons.append(f"max_instances reached: {f.budget_left} more backfill VMs allowed in the pool")
    return FillAnswer(vms > 0, vms, tuple(reasons), "fills" if vms > 0 else codes[-1], f.node_id)


def _blocked(f: FillFacts) -> tuple[str, str]:
    """The first check that keeps every backfill VM off the node: (code, reason), or ("", "")."""
    if not f.enabled:
        return "disabled", "backfill is disabled (gleanctl backfill enable)"
    if f.state != "up":
        return "down", f"the node is {f.state}: no report for a while, so nothing new goes there"
    if f.reserved:
        return "reserved", "a reserve keeps it free of backfill (gleanctl reserve)"
    if f.unable:
        return "unable", f.unable
    if not f.selected:
        return "not_selected", "not selected as a volunteer: " + (
            _foreground(f) if f.productivity is not None else "no foreground figures yet")
    if f.backoff_left_s > 0:
        return "backoff", f"launches paused {f.backoff_left_s:.0f} s more after failed launches (vm.launch_failed)"
    if f.lane_busy:
        return "busy", "its agent calls are backed up: no new launch until they drain"
    return "", ""


def _foreground(f: FillFacts) -> str:
    return (f"P (potential productivity) {f.productivity:.2f} cores, from predicted foreground "
            f"{f.predicted_foreground or 0.0:.2f} cores (last report: on-demand VMs {f.on_demand_cpu:.2f}, the "
            f"host's other load {f.host_other_cpu:.2f})")


def _productivity_bound(f: FillFacts, by_p: int) -> str:
    what = "no backfill VM" if by_p == 0 else f"{by_p} backfill VMs"
    return (f"{what} by its CPU: {_foreground(f)}, and backfill already holds {f.backfill_vcpus} vCPUs; a VM "
            f"of {f.vm.vcpus} vCPUs needs half a core free")
