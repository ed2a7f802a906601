"""The one module that touches traffic control (tc, through pyroute2) and tap counters.

Volunteers' taps get a token-bucket qdisc at the root (traffic the host sends into the
guest) and, where the kernel has the classifier and police action, an ingress policer
(traffic the guest sends). Foreground taps are never shaped. The agent's qdisc is the one
with handle 1: at the root; anything else there is left alone unless the agent must
replace it to shape a volunteer.
"""
from __future__ import annotations

from pathlib import Path

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.rtnl import TC_H_ROOT

from .settings import NetCap

OUR_HANDLE = 0x10000  # 1:
INGRESS_HANDLE = 0xFFFF0000
ETH_P_ALL = 0x0003


_ingress_unsupported = ""  # set once the kernel has refused an ingress policer


class NoSuchInterface(LookupError):
    pass


def _index(ipr: IPRoute, dev: str) -> int:
    found = ipr.link_lookup(ifname=dev)
    if not found:
        raise NoSuchInterface(f"no network interface {dev!r}")
    return found[0]


def _root_rate(ipr: IPRoute, index: int) -> int:
    """The rate (bytes/s) of our root tbf, or 0 when there is none."""
    for qdisc in ipr.get_qdiscs(index):
        if qdisc["parent"] == TC_H_ROOT and qdisc["handle"] == OUR_HANDLE and qdisc.get_attr("TCA_KIND") == "tbf":
            return int(qdisc.get_attr("TCA_OPTIONS").get_attr("TCA_TBF_PARMS")["rate"])
    return 0


def _has_ingress(ipr: IPRoute, index: int) -> bool:
    return any(q.get_attr("TCA_KIND") == "ingress" for q in ipr.get_qdiscs(index))


def apply_cap(dev: str, cap: NetCap) -> tuple[list[str], str]:
    """Make `dev` shaped as `cap`; returns (what changed, a note on what the kernel could not do)."""
    global _ingress_unsupported
    changes: list[str] = []
    note = _ingress_unsupported if cap.from_guest else ""
    with IPRoute() as ipr:
        index = _index(ipr, dev)
        have = _root_rate(ipr, index)
        if cap.to_guest and have != cap.to_guest:
            burst = max(cap.to_guest // 10, 16 * 1024)  # 100 ms worth, at least a few packets
            ipr.tc("replace", kind="tbf", index=index, handle=OUR_HANDLE, parent=TC_H_ROOT,
                   rate=f"{cap.to_guest * 8}bit", burst=burst, latency="50ms")
            changes.append(f"{dev} to-guest cap {have} -> {cap.to_guest} B/s")
        elif not cap.to_guest and have:
            ipr.tc("del", index=index, handle=OUR_HANDLE, parent=TC_H_ROOT)
            changes.append(f"{dev} to-guest cap {have} B/s removed")
        if cap.from_guest and not _ingress_unsupported and not _has_ingress(ipr, index):
            try:
                ipr.tc("add", kind="ingress", index=index, handle=INGRESS_HANDLE)
                ipr.tc("add-filter", kind="u32", index=index, parent=INGRESS_HANDLE, prio=1, protocol=ETH_P_ALL,
                       target=0x10001, keys=["0x0/0x0+0"],
                       action={"kind": "police", "rate": f"{cap.from_guest * 8}bit",
                               "burst": max(cap.from_guest // 10, 16 * 1024), "limit": 65536})
                changes.append(f"{dev} from-guest cap {cap.from_guest} B/s")
            except NetlinkError as exc:
                if _has_ingress(ipr, index):
                    ipr.tc("del", kind="ingress", index=index, handle=INGRESS_HANDLE)
                note = _ingress_unsupported = (
                    f"this kernel cannot police traffic from the guest: adding a u32 filter with a police "
                    f"action to the ingress qdisc failed ({exc.args[-1]}); the kernel most likely lacks the "
                    f"police action (CONFIG_NET_ACT_POLICE) or the u32 classifier; traffic from the guest "
                    f"is not capped")
        elif not cap.from_guest and _has_ingress(ipr, index):
            ipr.tc("del", kind="ingress", index=index, handle=INGRESS_HANDLE)
            changes.append(f"{dev} from-guest cap removed")
    return changes, note


def counters(dev: str, sys_root: Path = Path("/sys")) -> tuple[int, int]:
    """(bytes the guest received, bytes the guest sent): the tap's tx and rx, seen from the VM."""
    stats = sys_root / "class" / "net" / dev / "statistics"
    try:
        return int((stats / "tx_bytes").read_text()), int((stats / "rx_bytes").read_text())
    except FileNotFoundError:
        return 0, 0
