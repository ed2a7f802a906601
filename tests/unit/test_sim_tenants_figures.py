"""The simulator's per-tenant figures (controller/sim/tenant_figures.py), from real runs of the
books: rejections by bound, the time-weighted shares, and the two violation counts."""
from __future__ import annotations

import json

from controller.config import ControllerConfig, ledger_settings
from controller.core.records import BackfillConfig
from controller.sim.engine import SimSettings
from controller.sim.tenants import TenantSimulation, records, tenants_config
from controller.sim.trace_base import OnDemandRequest


def size(vcpus: int, mib: int) -> dict:
    return dict(vcpus=vcpus, memory_mib=mib)


def run(tenants: dict, requests: list[OnDemandRequest], settings: SimSettings, during=None):
    config = tenants_config(tenants)
    sim = TenantSimulation(config, requests, settings, BackfillConfig(), ledger_settings(ControllerConfig()))
    if during is not None:
        sim.at(during[0], lambda _arg: during[1](sim, config))
    return sim, sim.run()


def test_a_request_within_the_lower_bound_refused_for_room_is_a_violation():
    """Two nodes of 4 vCPUs and 8 GiB. The default tenant's memory-heavy VM fills one node's
    memory and its CPU-heavy VM the other's vCPUs: pool-wide, 3 vCPUs and 7 GiB stay free, and
    the bounds keep tenant a's lower bound (2 vCPUs, 4 GiB) for it, but no single node holds
    even 1 vCPU and 1 GiB. Tenant a's 1-vCPU request, within its guarantee, is refused: one
    violation. Its 3-vCPU request, past its lower bound, is refused too but is none."""
    tenants = dict(tenants=[dict(name="a", kind="on_demand", lower=size(2, 4096), upper=size(4, 8192))])
    requests = [OnDemandRequest(0.0, 1, 7680, None, "default", "heavy-memory"),
                OnDemandRequest(10.0, 4, 512, None, "default", "heavy-cpu"),
                OnDemandRequest(30.0, 3, 1024, 600.0, "a", "past-the-guarantee"),
                OnDemandRequest(40.0, 1, 1024, 600.0, "a", "within-the-guarantee")]
    sim, summary = run(tenants, requests, SimSettings(nodes=2, node_cpus=4, node_memory_mib=8192, days=0.01,
                                                        progress_seconds=0.0))
    a = summary["tenants"]["a"]
    assert sim.store.requests["heavy-memory"].outcome == sim.store.requests["heavy-cpu"].outcome == "placed"
    assert a["requests"] == 2 and a["placed"] == 0 and a["rejected"] == {"no_room": 2}
    assert a["lower_bound_violations"] == 1
    assert sim.tenant_book.violating["a"] == {"within-the-guarantee"}
    assert summary["figures"]["lower_bound_violations"] == 1 and summary["figures"]["upper_bound_violations"] == 0
    assert a["time_below_lower_share"] == 1.0 and a["mean_held_vcpus"] == 0.0
    default = summary["tenants"]["default"]
    assert default["placed"] == 2 and default["upper_vcpus"] is None


def test_rejections_by_bound_and_the_time_within_bounds():
    """Tenant a (lower 4, upper 8 vCPUs) asks for five 2-vCPU VMs: four are placed, the fifth is
    past its upper bound. The default tenant then asks for more than a's unused guarantee leaves."""
    tenants = dict(tenants=[dict(name="a", kind="on_demand", lower=size(4, 8192), upper=size(8, 16384))])
    requests = [OnDemandRequest(float(i), 2, 2048, 1800.0, "a", f"a{i}") for i in range(5)]
    requests.append(OnDemandRequest(2000.0, 16, 4096, 600.0, "someone", "d0"))   # a holds 0 then: 4 kept for it
    sim, summary = run(tenants, requests, SimSettings(nodes=1, node_cpus=16, node_memory_mib=65536, days=3600 / 86400,
                                                        progress_seconds=0.0, launch_seconds=0.0, stop_seconds=0.0))
    a, default = summary["tenants"]["a"], summary["tenants"]["default"]
    assert a["rejected"] == {"tenant_upper_bound": 1} and a["placed"] == 4
    assert default["rejected"] == {"tenant_lower_bounds": 1}
    assert a["lower_bound_violations"] == a["upper_bound_violations"] == 0
    # a held 8 vCPUs from about 0 to 1800 s of 3600: within its bounds half the time, below after
    assert 0.49 < a["time_within_bounds_share"] < 0.51 and 0.49 < a["time_below_lower_share"] < 0.51
    assert abs(a["on_demand_vcpu_hours"] - 8 * 1800 / 3600) < 0.05   # 8 vCPUs for 1800 s, from booking


def test_an_upper_bound_lowered_under_what_a_tenant_holds_is_one_violation():
    """An admin lowers tenant a's upper bound to 4 vCPUs while it holds 6: one episode past its
    upper bound, lasting until its VMs end."""
    tenants = dict(tenants=[dict(name="a", kind="on_demand", lower=size(0, 0), upper=size(8, 16384))])
    requests = [OnDemandRequest(float(i), 2, 2048, 3000.0, "a", f"a{i}") for i in range(3)]

    def lower_it(sim, config):
        lowered = [r if r.name != "a" else type(r)(**{**r.__dict__, "upper_vcpus": 4}) for r in records(config, sim.now)]
        sim.set_tenant_records(lowered)

    sim, summary = run(tenants, requests, SimSettings(nodes=1, node_cpus=16, node_memory_mib=65536, days=3600 / 86400,
                                                        progress_seconds=0.0, launch_seconds=0.0, stop_seconds=0.0),
                       during=(1200.0, lower_it))
    a = summary["tenants"]["a"]
    assert a["upper_bound_violations"] == 1 and summary["figures"]["upper_bound_violations"] == 1
    assert a["upper_vcpus"] == 4
    # over from 1200 s until the first of its VMs ended (~3000 s): about half the hour
    assert 0.45 < a["time_above_upper_share"] < 0.55
    json.dumps(summary)   # the summary stays JSON
