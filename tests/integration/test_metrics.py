"""Metrics from a real agent: a CPU hog volunteer shows up as harvest, not as demand."""
from __future__ import annotations

import time
import urllib.request

from protos import agent_pb2
from tests.agentproc import launch_request, unique_name, wait_for, wait_for_console


def test_metrics_over_grpc_and_prometheus(agent, stub):
    vol = unique_name("metrics-hog")
    reply = stub.LaunchDomain(launch_request(vol, agent_pb2.ROLE_BACKFILL, kernel_cmdline="gleaner.workload=hog",
                                             memory_mib=96))
    wait_for_console(reply.domain.console_log, "GLEANER-HOG", timeout=60)
    time.sleep(2.5)  # two sampling intervals with the hog running
    snap = wait_for(lambda: next((s for s in [stub.GetMetrics(agent_pb2.GetMetricsRequest())]
                                  if any(d.name == vol for d in s.domains)), None), 10, "the hog in the metrics")
    hog = next(d for d in snap.domains if d.name == vol)
    assert hog.role == agent_pb2.ROLE_BACKFILL and hog.memory_bytes == 96 * 2**20
    assert hog.cpu_cores > 0.5  # a TCG hog keeps a host CPU busy
    assert 0 < snap.interval_seconds < 3
    host = snap.host
    assert host.cpus >= 1 and host.memory_total_bytes > host.memory_available_bytes > 0
    assert host.cpu_busy_cores >= hog.cpu_cores * 0.8
    # The hog is harvest: residual CPU is the host's CPUs less everything but volunteers.
    volunteers = sum(d.cpu_cores for d in snap.domains if d.priority_class == agent_pb2.PRIORITY_CLASS_VOLUNTEER)
    demand = max(host.cpu_busy_cores - volunteers, 0)
    assert abs(snap.residual.foreground_cpu_demand_cores - demand) < 1e-6
    assert abs(snap.residual.residual_cpu_cores - (host.cpus - demand)) < 1e-6
    assert 0 <= snap.agent_cpu_percent < 50

    body = urllib.request.urlopen(f"http://127.0.0.1:{agent.metrics_port}/metrics", timeout=5).read().decode()
    assert f'gleaner_vm_cpu_seconds_total{{class="volunteer",domain="{vol}",role="volunteer"}}' in body
    assert "gleaner_residual_cpu_cores " in body
    assert "# TYPE gleaner_vm_cpu_seconds_total counter" in body
    # the host's figures are counters as node_exporter's are (rates are PromQL's), in base units
    for counter in ("gleaner_host_cpu_busy_seconds", "gleaner_host_disk_read_bytes", "gleaner_host_disk_written_bytes",
                    "gleaner_host_network_receive_bytes", "gleaner_agent_cpu_seconds"):
        assert f"# TYPE {counter}_total counter" in body, counter
    assert "_per_s" not in body and "usage_ratio" not in body
    # what every Gleaner server exports, and the calls it answered (this test's LaunchDomain among them)
    assert 'gleaner_build_info{component="agent"' in body
    assert 'gleaner_rpc_calls_total{code="OK",method="LaunchDomain"}' in body
