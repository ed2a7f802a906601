"""Rates and residual capacity from two samples: a pure function, checked on made-up counters."""
from __future__ import annotations

import pytest

from gleaner_common.vocabulary import PriorityClass
from nodeagent.metrics import DomainCounters, DomainInfo, HostCounters, Sample, snapshot

GIB = 2**30


def host(busy_s: float, agent_s: float = 0.0, disk_read: int = 0) -> HostCounters:
    return HostCounters(cpu_busy_seconds=busy_s, memory_total_bytes=16 * GIB, memory_available_bytes=8 * GIB,
                        disk_read_bytes=disk_read, disk_write_bytes=0, disk_read_ops=0, disk_write_ops=0,
                        net_rx_bytes=0, net_tx_bytes=0, agent_cpu_seconds=agent_s)


INFO = {"fg": DomainInfo(PriorityClass.FOREGROUND, PriorityClass.FOREGROUND, 2048),
        "vol": DomainInfo(PriorityClass.VOLUNTEER, PriorityClass.VOLUNTEER, 1024),
        "promoted": DomainInfo(PriorityClass.VOLUNTEER, PriorityClass.FOREGROUND, 512)}


def test_rates_and_residual_capacity():
    before = Sample(0.0, host(100.0, agent_s=1.0, disk_read=0),
                    {"fg": DomainCounters(cpu_ns=0), "vol": DomainCounters(cpu_ns=0, write_bytes=0),
                     "promoted": DomainCounters(cpu_ns=0)})
    after = Sample(2.0, host(103.0, agent_s=1.01, disk_read=4096),
                   {"fg": DomainCounters(cpu_ns=int(1e9)), "vol": DomainCounters(cpu_ns=int(1.6e9), write_bytes=2000),
                    "promoted": DomainCounters(cpu_ns=int(0.2e9)), "newcomer": DomainCounters(cpu_ns=5)})
    snap = snapshot(before, after, INFO, cpus=4)
    rates = {d.name: d for d in snap.domains}
    assert set(rates) == {"fg", "vol", "promoted"}  # the newcomer has no rate yet
    assert rates["fg"].cpu_cores == pytest.approx(0.5) and rates["vol"].cpu_cores == pytest.approx(0.8)
    assert rates["vol"].block_write_bytes_per_s == pytest.approx(1000)
    assert snap.host["cpu_busy_cores"] == pytest.approx(1.5)
    assert snap.host["disk_read_bytes_per_s"] == pytest.approx(2048)
    # Volunteers' use is harvest: demand is the rest, residual what demand leaves of 4 CPUs.
    assert snap.residual.foreground_cpu_demand_cores == pytest.approx(1.5 - 0.8)
    assert snap.residual.residual_cpu_cores == pytest.approx(4 - 0.7)
    # Memory: the foreground class holds fg and the promoted volunteer.
    assert snap.residual.foreground_memory_bytes == (2048 + 512) * 2**20
    assert snap.residual.residual_memory_bytes == 16 * GIB - (2048 + 512) * 2**20
    assert snap.agent_cpu_percent == pytest.approx(0.5)


def test_counters_that_go_back_count_as_no_change():
    before = Sample(0.0, host(10.0), {"fg": DomainCounters(cpu_ns=int(5e9))})
    after = Sample(1.0, host(9.0), {"fg": DomainCounters(cpu_ns=int(1e9))})
    snap = snapshot(before, after, INFO, cpus=2)
    assert snap.domains[0].cpu_cores == 0 and snap.host["cpu_busy_cores"] == 0
    assert snap.residual.residual_cpu_cores == 2


def test_the_sampler_gathers_through_what_it_is_given_and_does_only_the_arithmetic():
    from nodeagent.metrics import Sampler
    readings = iter([host(100.0), host(101.0)])
    domains = iter([{"fg": DomainCounters(cpu_ns=0)}, {"fg": DomainCounters(cpu_ns=int(1e9))}])
    sampler = Sampler(lambda: {"fg": INFO["fg"]}, lambda: 2, lambda names: next(domains),
                      host_counters=lambda: next(readings))
    assert sampler.sample() is None   # rates need two samples
    snap = sampler.sample()
    assert snap is sampler.latest() and [d.name for d in snap.domains] == ["fg"]
    assert snap.host["memory_total_bytes"] == 16 * GIB


def test_the_hosts_own_counters_are_read_through_the_host_layer():
    from nodeagent.host import system
    counters = system.HostReader()()
    assert counters.memory_total_bytes == system.memory_total_bytes() > 0
    assert counters.cpu_busy_seconds > 0 and counters.agent_cpu_seconds > 0
