"""Collection: each running domain's cumulative counters, for the sampler (nodeagent/metrics.py).

Counters are read from the kernel (the domain's cgroups and its taps), never through
libvirt: its statistics take a domain job and ask QEMU's monitor, which a busy or starved
QEMU answers late, and one slow domain would stall the whole sample.
"""
from __future__ import annotations

from pathlib import Path

from .host import cgroups, netshape
from .inventory import Inventory
from .metrics import DomainCounters, DomainInfo
from .priorityctl import PriorityController


class Collection:
    def __init__(self, inventory: Inventory, priority: PriorityController) -> None:
        self.inventory = inventory
        self.priority = priority
        self._pids: dict[str, list[int]] = {}  # domain -> its QEMU process, for CPU counters

    def domain_info(self) -> dict[str, DomainInfo]:
        """The running managed domains the sampler measures, and what it needs to know of them."""
        return self.inventory.domain_info()

    def _process_cpu_ns(self, name: str, group: Path) -> int:
        """CPU of the domain's QEMU, its pids cached while it runs (looked up again if gone)."""
        for attempt in (1, 2):
            pids = self._pids.get(name) or self._pids.setdefault(name, cgroups.group_pids(group))
            try:
                return cgroups.process_cpu_ns(pids)
            except (FileNotFoundError, ProcessLookupError):
                self._pids.pop(name, None)
        return 0

    def counters(self, names: list[str]) -> dict[str, DomainCounters]:
        """Cumulative counters of running domains, read from the kernel (their cgroups)."""
        for gone in set(self._pids) - set(names):  # removed since the last sample
            self._pids.pop(gone, None)
        version = self.priority.facts.version
        groups = self.priority.groups
        info = self.inventory.domain_info()
        out = {}
        for name in names:
            cpu_group = groups.find(name)
            if cpu_group is None:
                continue  # stopped since the last reconcile
            acct_group = groups.find(name, "cpuacct") if version == 1 else cpu_group
            cpu_ns = (cgroups.cpu_usage_ns(acct_group, version) if acct_group is not None
                      else self._process_cpu_ns(name, cpu_group))
            block_group = groups.find(name, "blkio" if version == 1 else "cpu")
            block = cgroups.block_counters(block_group, version) if block_group else cgroups.BlockCounters()
            interfaces = info[name].interfaces if name in info else ()
            traffic = [netshape.counters(dev) for dev in interfaces]
            out[name] = DomainCounters(cpu_ns=cpu_ns,
                                       read_bytes=block.read_bytes, write_bytes=block.write_bytes,
                                       read_ops=block.read_ops, write_ops=block.write_ops,
                                       rx_bytes=sum(t[0] for t in traffic), tx_bytes=sum(t[1] for t in traffic))
        return out
