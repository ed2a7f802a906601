"""Metrics: counters sampled every second, turned into rates and residual capacity.

Gathering (the host's counters from host/system.py, the VMs' from nodeagent/collection.py,
both read through nodeagent/host/) is kept apart from the arithmetic: `snapshot()` is a pure
function of two samples, which the tests and the controller's simulation can feed directly.
The Prometheus collector serves the latest snapshot.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Iterator, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from gleaner_common.vocabulary import PriorityClass

from .host.system import HostCounters, HostReader

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DomainCounters:
    """Cumulative counters of one running domain (all disks and interfaces summed),
    read from the kernel."""

    cpu_ns: int = 0
    read_bytes: int = 0
    write_bytes: int = 0
    read_ops: int = 0
    write_ops: int = 0
    rx_bytes: int = 0
    tx_bytes: int = 0


@dataclass(frozen=True)
class DomainInfo:
    """What the agent knows of a running domain, beside its counters."""

    role: PriorityClass
    priority_class: PriorityClass
    memory_mib: int
    interfaces: tuple[str, ...] = ()


@dataclass(frozen=True)
class Sample:
    time: float  # monotonic seconds
    host: HostCounters
    domains: dict[str, DomainCounters]


@dataclass(frozen=True)
class DomainRates:
    name: str
    role: PriorityClass
    priority_class: PriorityClass
    cpu_cores: float
    memory_bytes: int
    block_read_bytes_per_s: float
    block_write_bytes_per_s: float
    block_read_ops_per_s: float
    block_write_ops_per_s: float
    net_rx_bytes_per_s: float
    net_tx_bytes_per_s: float


@dataclass(frozen=True)
class Residual:
    foreground_cpu_demand_cores: float
    residual_cpu_cores: float
    foreground_memory_bytes: int
    residual_memory_bytes: int


@dataclass(frozen=True)
class Snapshot:
    interval_seconds: float
    cpus: int
    host: dict[str, float]
    domains: list[DomainRates]
    residual: Residual
    agent_cpu_percent: float
    counters: Sample
    time: datetime = field(default_factory=lambda: datetime.now(timezone.utc))


def _rate(new: float, old: float, seconds: float) -> float:
    return max(new - old, 0) / seconds  # a counter that went back (a restart) counts as no change


def snapshot(prev: Sample, cur: Sample, info: dict[str, DomainInfo], cpus: int) -> Snapshot:
    """Rates over the interval between two samples, and the residual capacity they imply.

    Residual CPU is what the foreground leaves unused: the host's CPUs less everything busy
    except volunteers (their use is harvest, not demand). Residual memory is what is not
    allocated to foreground VMs.
    """
    dt = max(cur.time - prev.time, 1e-6)
    domains = []
    for name, now in sorted(cur.domains.items()):
        before = prev.domains.get(name)
        meta = info.get(name)
        if before is None or meta is None:
            continue  # new since the last sample, or not ours
        domains.append(DomainRates(
            name=name, role=meta.role, priority_class=meta.priority_class,
            cpu_cores=_rate(now.cpu_ns, before.cpu_ns, dt) / 1e9, memory_bytes=meta.memory_mib * 2**20,
            block_read_bytes_per_s=_rate(now.read_bytes, before.read_bytes, dt),
            block_write_bytes_per_s=_rate(now.write_bytes, before.write_bytes, dt),
            block_read_ops_per_s=_rate(now.read_ops, before.read_ops, dt),
            block_write_ops_per_s=_rate(now.write_ops, before.write_ops, dt),
            net_rx_bytes_per_s=_rate(now.rx_bytes, before.rx_bytes, dt),
            net_tx_bytes_per_s=_rate(now.tx_bytes, before.tx_bytes, dt)))
    h0, h1 = prev.host, cur.host
    busy = min(_rate(h1.cpu_busy_seconds, h0.cpu_busy_seconds, dt), float(cpus))
    volunteer_cpu = sum(d.cpu_cores for d in domains if d.priority_class is PriorityClass.VOLUNTEER)
    foreground_demand = max(busy - volunteer_cpu, 0.0)
    foreground_memory = sum(m.memory_mib * 2**20 for n, m in info.items()
                            if m.priority_class is PriorityClass.FOREGROUND and n in cur.domains)
    host = {
        "cpu_busy_cores": busy, "memory_total_bytes": h1.memory_total_bytes,
        "memory_available_bytes": h1.memory_available_bytes,
        "disk_read_bytes_per_s": _rate(h1.disk_read_bytes, h0.disk_read_bytes, dt),
        "disk_write_bytes_per_s": _rate(h1.disk_write_bytes, h0.disk_write_bytes, dt),
        "disk_read_ops_per_s": _rate(h1.disk_read_ops, h0.disk_read_ops, dt),
        "disk_write_ops_per_s": _rate(h1.disk_write_ops, h0.disk_write_ops, dt),
        "net_rx_bytes_per_s": _rate(h1.net_rx_bytes, h0.net_rx_bytes, dt),
        "net_tx_bytes_per_s": _rate(h1.net_tx_bytes, h0.net_tx_bytes, dt),
    }
    residual = Residual(foreground_cpu_demand_cores=foreground_demand,
                        residual_cpu_cores=max(cpus - foreground_demand, 0.0),
                        foreground_memory_bytes=foreground_memory,
                        residual_memory_bytes=max(h1.memory_total_bytes - foreground_memory, 0))
    agent_percent = _rate(h1.agent_cpu_seconds, h0.agent_cpu_seconds, dt) * 100
    return Snapshot(interval_seconds=dt, cpus=cpus, host=host, domains=domains, residual=residual,
                    agent_cpu_percent=agent_percent, counters=cur)


class Sampler:
    """Takes a sample when called (every second, by the scheduler) and keeps the latest snapshot."""

    def __init__(self, domain_info: Callable[[], dict[str, DomainInfo]], cpus: Callable[[], int],
                 counters: Callable[[list[str]], dict[str, DomainCounters]],
                 host_counters: Callable[[], HostCounters] | None = None):
        self.counters = counters
        self.domain_info = domain_info
        self.cpus = cpus
        self.host_counters = host_counters or HostReader()   # the host's totals, read through host/system.py
        self._prev: Sample | None = None
        self._latest: Snapshot | None = None
        self._lock = threading.Lock()

    def sample(self) -> Snapshot | None:
        info = self.domain_info()
        current = Sample(time=time.monotonic(), host=self.host_counters(),
                         domains=self.counters(list(info)))
        with self._lock:
            prev, self._prev = self._prev, current
            if prev is not None:
                self._latest = snapshot(prev, current, info, self.cpus())
            return self._latest

    def latest(self) -> Snapshot | None:
        with self._lock:
            return self._latest


class EventCounts(Protocol):
    def counts(self) -> dict[str, int]: ...


class PrometheusCollector(Collector):
    """Serves the latest snapshot in Prometheus' conventions: counters for what accumulates
    (named *_total, in base units), gauges for rates and capacities."""

    def __init__(self, sampler: Sampler, events: EventCounts | None = None) -> None:
        self.sampler = sampler
        self.events = events

    def collect(self) -> Iterator:
        snap = self.sampler.latest()
        if snap is None:
            return
        labels = ["domain", "role", "class"]
        vm_counters = {
            "cpu_seconds": ("CPU time used by the VM", lambda c: c.cpu_ns / 1e9),
            "block_read_bytes": ("Bytes read from the VM's disks", lambda c: c.read_bytes),
            "block_write_bytes": ("Bytes written to the VM's disks", lambda c: c.write_bytes),
            "block_read_ops": ("Read requests of the VM's disks", lambda c: c.read_ops),
            "block_write_ops": ("Write requests of the VM's disks", lambda c: c.write_ops),
            "network_receive_bytes": ("Bytes received by the VM's interfaces", lambda c: c.rx_bytes),
            "network_transmit_bytes": ("Bytes sent by the VM's interfaces", lambda c: c.tx_bytes),
        }
        for key, (text, read) in vm_counters.items():
            family = CounterMetricFamily(f"gleaner_vm_{key}", text, labels=labels)
            for d in snap.domains:
                family.add_metric([d.name, d.role.value, d.priority_class.value],
                                  read(snap.counters.domains[d.name]))
            yield family
        cores = GaugeMetricFamily("gleaner_vm_cpu_usage_cores", "CPU the VM used over the last interval",
                                  labels=labels)
        memory = GaugeMetricFamily("gleaner_vm_memory_bytes", "Memory allocated to the VM", labels=labels)
        for d in snap.domains:
            cores.add_metric([d.name, d.role.value, d.priority_class.value], d.cpu_cores)
            memory.add_metric([d.name, d.role.value, d.priority_class.value], d.memory_bytes)
        yield cores
        yield memory
        yield from host_metrics(snap)
        residual = snap.residual
        for key, text in (("foreground_cpu_demand_cores", "CPU the host used over the last interval for "
                           "everything but volunteer VMs: on-demand VMs and the host's own load"),
                          ("residual_cpu_cores", "The host's CPUs less the foreground demand: what backfill "
                           "may use"),
                          ("foreground_memory_bytes", "Memory allocated to foreground (on-demand) VMs"),
                          ("residual_memory_bytes", "The host's memory less what foreground VMs are allocated")):
            yield GaugeMetricFamily(f"gleaner_{key}", text, value=getattr(residual, key))
        if self.events is not None:
            events = CounterMetricFamily("gleaner_agent_events", "What the agent did on its own, by kind "
                                         "(guard.boost, guard.release, class.changed, drift.corrected, "
                                         "network.limited)", labels=["kind"])
            for kind, count in sorted(self.events.counts().items()):
                events.add_metric([kind], count)
            yield events


# The host's counters as node_exporter names its own (rates are PromQL's: rate(...[1m])).
HOST_COUNTERS = (
    ("gleaner_host_cpu_busy_seconds", "CPU time the host's CPUs spent busy (user, nice, system, irq, softirq), "
     "all CPUs summed", lambda h: h.cpu_busy_seconds),
    ("gleaner_host_disk_read_bytes", "Bytes read from the host's disks", lambda h: h.disk_read_bytes),
    ("gleaner_host_disk_written_bytes", "Bytes written to the host's disks", lambda h: h.disk_write_bytes),
    ("gleaner_host_disk_reads_completed", "Reads completed by the host's disks", lambda h: h.disk_read_ops),
    ("gleaner_host_disk_writes_completed", "Writes completed by the host's disks", lambda h: h.disk_write_ops),
    ("gleaner_host_network_receive_bytes", "Bytes the host's interfaces received", lambda h: h.net_rx_bytes),
    ("gleaner_host_network_transmit_bytes", "Bytes the host's interfaces sent", lambda h: h.net_tx_bytes),
    ("gleaner_agent_cpu_seconds", "CPU time the agent process itself used", lambda h: h.agent_cpu_seconds),
)


def host_metrics(snap: Snapshot) -> Iterator:
    """The host's CPUs and memory (gauges) and its cumulative counters (counters, `_total`)."""
    host = snap.counters.host
    yield GaugeMetricFamily("gleaner_host_cpus", "CPUs of the host", value=snap.cpus)
    yield GaugeMetricFamily("gleaner_host_memory_total_bytes", "Memory of the host", value=host.memory_total_bytes)
    yield GaugeMetricFamily("gleaner_host_memory_available_bytes", "Memory the host could give without "
                            "swapping (MemAvailable)", value=host.memory_available_bytes)
    for name, text, read in HOST_COUNTERS:
        family = CounterMetricFamily(name, text)
        family.add_metric([], read(host))
        yield family
