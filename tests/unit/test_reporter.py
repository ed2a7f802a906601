"""The agent's report: what it says of each VM's CPU (the controller's idle_first reads it)."""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

from nodeagent.reporter import Reporter
from nodeagent.validation import Role


class Inventory:
    """Two running volunteers, as the agent's inventory lists them."""

    def host_facts(self):
        return SimpleNamespace(cpus=2, memory_mib=4096)

    def running(self):
        meta = SimpleNamespace(lease_id="L", role=Role.VOLUNTEER, launched_at=datetime.now(timezone.utc), image="tiny")
        shape = SimpleNamespace(vcpus=1, memory_mib=128)
        return [("sampled", meta, shape), ("new", meta, shape)]


class Sampler:
    """A sample that has a figure for one VM only (the other started since the last one)."""

    def latest(self):
        return SimpleNamespace(domains=[SimpleNamespace(name="sampled", cpu_cores=0.01)], host={"cpu_busy_cores": 0.5},
                               residual=SimpleNamespace(foreground_cpu_demand_cores=0.4, residual_cpu_cores=1.6,
                                                        residual_memory_bytes=2**30))


def test_a_vm_without_a_cpu_sample_is_reported_as_such_not_as_idle(tmp_path: Path):
    config = SimpleNamespace(agent_id="n1", reachable_address="n1:7451", image_dir=tmp_path)
    report = Reporter(config, Inventory(), Sampler()).build()
    vms = {vm.name: vm for vm in report.vms}
    assert (vms["sampled"].cpu_cores, vms["sampled"].cpu_sampled) == (0.01, True)
    assert (vms["new"].cpu_cores, vms["new"].cpu_sampled) == (0.0, False)
