"""The one module that reads the host's own totals through psutil (which reads /proc): CPU,
memory, disk and network counters, the agent's own CPU time, and the kernel's MemTotal.

Reads only, as cumulative counters: the sampler (nodeagent/metrics.py) turns two of them into
rates. Per-domain counters are read from cgroupfs and sysfs (host/cgroups.py, host/netshape.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class HostCounters:
    cpu_busy_seconds: float
    memory_total_bytes: int
    memory_available_bytes: int
    disk_read_bytes: int
    disk_write_bytes: int
    disk_read_ops: int
    disk_write_ops: int
    net_rx_bytes: int
    net_tx_bytes: int
    agent_cpu_seconds: float


def read_host_counters(process: psutil.Process) -> HostCounters:
    """The host's counters now; `process` is the agent's own (psutil.Process())."""
    cpu = psutil.cpu_times()
    busy = cpu.user + cpu.nice + cpu.system + getattr(cpu, "irq", 0) + getattr(cpu, "softirq", 0) \
        + getattr(cpu, "steal", 0)
    memory = psutil.virtual_memory()
    disk = psutil.disk_io_counters(perdisk=False)
    net = psutil.net_io_counters(pernic=False)
    own = process.cpu_times()
    return HostCounters(
        cpu_busy_seconds=busy, memory_total_bytes=memory.total, memory_available_bytes=memory.available,
        disk_read_bytes=disk.read_bytes if disk else 0, disk_write_bytes=disk.write_bytes if disk else 0,
        disk_read_ops=disk.read_count if disk else 0, disk_write_ops=disk.write_count if disk else 0,
        net_rx_bytes=net.bytes_recv, net_tx_bytes=net.bytes_sent,
        agent_cpu_seconds=own.user + own.system + own.children_user + own.children_system)


class HostReader:
    """Reads the host's counters when called, keeping psutil's handle on the agent's own process."""

    def __init__(self) -> None:
        self._process = psutil.Process()

    def __call__(self) -> HostCounters:
        return read_host_counters(self._process)


def memory_total_bytes() -> int:
    """The kernel's MemTotal: all the memory the host has, hot-plugged memory included."""
    return psutil.virtual_memory().total
