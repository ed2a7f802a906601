"""The simulator's tenants file and how trace owners map to tenants (controller/sim/tenants.py)."""
from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from controller.core.records import Size
from controller.sim import cli
from controller.sim.tenants import (TenantsError, assign_jobs, assign_requests, bag_of_jobs, check_admission,
                                    load_tenants, records, share_point, tenant_for, tenants_config)
from controller.sim.trace_base import Job, OnDemandRequest

TOML = """
rbt = 1.5
urr = 0.8
[assign]
on_demand_key = "owner"
seed = 3
[[tenants]]
name = "web"
kind = "on_demand"
lower = {vcpus = 8, memory_mib = 32768}
upper = {vcpus = 32, memory_mib = 131072}
owners = ["alice"]
share = 0.5
[[tenants]]
name = "api"
kind = "on-demand"
lower = {vcpus = 4, memory_mib = 16384}
upper = {vcpus = 16, memory_mib = 65536}
share = 0.25
[[tenants]]
name = "science"
kind = "batch"
lower = {vcpus = 8, memory_mib = 32768}
upper = {vcpus = 32, memory_mib = 131072}
owners = ["12"]
start_s = 3600
backfill = {vcpus = 2, memory_mb = 8192}
goal = {kind = "deadline", work_vcpu_hours = 10, deadline_after_s = 7200}
work = {vcpu_hours = 10, procs = 2, runtime_s = 1000}
"""


def write(tmp_path: Path, text: str, name: str = "tenants.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_toml_and_json_files_give_the_same_tenants(tmp_path):
    from_toml = load_tenants(write(tmp_path, TOML))
    import tomllib
    from_json = load_tenants(write(tmp_path, json.dumps(tomllib.loads(TOML)), "tenants.json"))
    assert from_toml.tenants == from_json.tenants
    assert (from_toml.rbt, from_toml.urr, from_toml.on_demand_key, from_toml.seed) == (1.5, 0.8, "owner", 3)
    api = from_toml.named("api")
    assert api.kind == "on_demand" and api.lower == Size(4, 16384)   # on-demand spelt as gleanctl does


@pytest.mark.parametrize("change, named", [
    (lambda d: d["tenants"][0].update(kind="web"), "tenant.kind"),
    (lambda d: d["tenants"][0].update(lower={"vcpus": 64, "memory_mib": 32768}), "above its upper bound"),
    (lambda d: d["tenants"][0].update(lower={"vcpus": 8}), "tenants[0].lower"),
    (lambda d: d["tenants"][0].update(colour="red"), "unknown key(s) colour"),
    (lambda d: d["tenants"][1].update(share=0.6), "shares add up to 1.1"),
    (lambda d: d["tenants"][0].update(goal={"kind": "deadline"}), "only a batch tenant"),
    (lambda d: d["tenants"][2].update(goal={"kind": "fast"}), "goal.kind"),
    (lambda d: d["tenants"][2].update(work={"vcpu_hours": -1, "procs": 1, "runtime_s": 60}), "work.vcpu_hours"),
    (lambda d: d["tenants"][2].update(backfill={"policy": "any"}), "backfill: unknown key(s) policy"),
    (lambda d: d["tenants"][1].update(name="web"), "'web' is given 2 times"),
    (lambda d: d.update(urr=2), "tenancy.urr"),
    (lambda d: d["assign"].update(on_demand_key="email"), "assign.on_demand_key 'email'"),
])
def test_a_bad_file_is_refused_naming_the_key(tmp_path, change, named):
    import tomllib
    data = tomllib.loads(TOML)
    change(data)
    with pytest.raises(TenantsError) as caught:
        tenants_config(data, "t.toml")
    assert named in str(caught.value) and str(caught.value).startswith("t.toml")


def test_the_cli_reports_a_bad_tenants_file_without_a_traceback(tmp_path, capsys):
    trace = tmp_path / "r.csv"
    trace.write_text("arrival_s,vcpus,memory_mib,lifetime_s\n0,1,1024,60\n")
    bad = write(tmp_path, TOML.replace('kind = "batch"', 'kind = "batchy"'))
    code = cli.main(["--requests", str(trace), "--format", "csv", "--nodes", "2", "--days", "0.01", "--quiet",
                     "--backfill", "enabled=true", "--tenants", str(bad)])
    err = capsys.readouterr().err
    assert code == 2 and "tenants[2]" in err and "batchy" in err and "Traceback" not in err


def test_admission_refuses_upper_bounds_past_capacity_times_rbt(tmp_path):
    tenants = load_tenants(write(tmp_path, TOML))
    check_admission(tenants, Size(64, 262144))   # uppers 80 vCPUs <= 64 x 1.5
    with pytest.raises(TenantsError) as caught:
        check_admission(tenants, Size(32, 131072))
    assert "capacity x RBT 1.5 = 48 vCPUs" in str(caught.value)


def test_owners_first_then_shares_by_a_seeded_hash_then_the_default(tmp_path):
    tenants = load_tenants(write(tmp_path, TOML))
    specs = [s for s in tenants.tenants if s.kind == "on_demand"]
    assert tenant_for("alice", "any", specs, 3, "default") == "web"
    picked = Counter(tenant_for("bob", f"vm{i}", specs, 3, "default") for i in range(20000))
    assert abs(picked["web"] / 20000 - 0.5) < 0.02
    assert abs(picked["api"] / 20000 - 0.25) < 0.02
    assert abs(picked["default"] / 20000 - 0.25) < 0.02
    # seeded per request: the same id always goes the same way, another seed elsewhere
    assert share_point(3, "vm1") == share_point(3, "vm1") != share_point(4, "vm1")
    azure = [OnDemandRequest(float(i), 1, 1024, 60.0, "azure-p0", f"vm{i}") for i in range(100)]
    mapped = assign_requests(azure, tenants, "azure")
    assert [r.owner for r in mapped] == [tenant_for("azure-p0", r.request_id, specs, 3, "default") for r in azure]
    assert [r.request_id for r in mapped] == [r.request_id for r in azure]


def swf_line(job_id: int, submit: int, procs: int, user: int, group: int) -> str:
    fields = [job_id, submit, 0, 600, procs, -1, -1, procs, 600, -1, 1, user, group, -1, 1, -1, -1, -1]
    return " ".join(str(f) for f in fields)


def test_swf_requests_and_jobs_map_by_user_or_group(tmp_path):
    path = tmp_path / "t.swf.gz"
    with gzip.open(path, "wt") as f:
        f.write("; MaxProcs: 64\n" + "\n".join(swf_line(i, 10 * i, 2, 12 if i % 2 else 5, 40 + i % 3)
                                               for i in range(1, 21)) + "\n")
    data = json.loads(json.dumps(tenants_config_data()))
    data["assign"] = dict(on_demand_key="swf_user", batch_key="swf_group")
    data["tenants"][0]["owners"] = ["5"]
    data["tenants"][2]["owners"] = ["41"]
    tenants = tenants_config(data)
    from controller.sim import traces
    requests = traces.tile(traces.swf_requests(path), 500.0, 1000.0)   # copies <id>#1 keep their user
    mapped = assign_requests(requests, tenants, "swf", path)
    for request in mapped:
        number = int(request.request_id.partition("#")[0])
        if number % 2 == 0:
            assert request.owner == "web"   # user 5
        else:   # user 12: no owners list has it, so by share (web 0.5, api 0.25) or the default
            assert request.owner == tenant_for(None, request.request_id, tenants.tenants[:2], tenants.seed, "default")
    jobs = traces.swf_jobs(path)
    assert {j.user for j in jobs} == {5, 12} and {j.group for j in jobs} == {40, 41, 42}
    by_tenant = assign_jobs(jobs, tenants)
    assert sorted(j.job_id for j in by_tenant["science"]) == sorted(j.job_id for j in jobs if j.group == 41)
    assert set(by_tenant) == {"science", "backfill"}   # the rest go to the built-in batch tenant


def tenants_config_data() -> dict:
    import tomllib
    return tomllib.loads(TOML)


def test_jobs_compare_as_before_tenants():
    assert Job(0, 60, 1, "1", 0, user=5, group=2) == Job(0, 60, 1, "1", 0)


def test_a_bag_of_work_adds_up_to_its_vcpu_hours(tmp_path):
    spec = load_tenants(write(tmp_path, TOML)).named("science")
    jobs = bag_of_jobs(spec, 3600.0)
    assert sum(j.procs * j.runtime for j in jobs) == pytest.approx(10 * 3600)
    assert {j.submit for j in jobs} == {3600.0} and {j.procs for j in jobs} == {2}
    assert len(jobs) == 18 and jobs[-1].runtime == pytest.approx(1000.0)


def test_a_batch_tenant_waits_for_its_start_and_its_goal_is_made_absolute(tmp_path):
    tenants = load_tenants(write(tmp_path, TOML))
    before = {r.name: r for r in records(tenants, 0.0)}
    assert json.loads(before["science"].backfill) == {"vcpus": 2, "memory_mb": 8192, "enabled": False}
    assert before["science"].goal is None
    after = {r.name: r for r in records(tenants, 3600.0, {"science": 20.0})}
    assert json.loads(after["science"].backfill) == {"vcpus": 2, "memory_mb": 8192}
    assert json.loads(after["science"].goal) == {"kind": "deadline", "work_vcpu_hours": 10, "deadline_s": 10800.0}
    on_residual = tenants_config({**tenants_config_data(), "tenants": [
        {**tenants_config_data()["tenants"][2], "goal": {"kind": "deadline", "work_vcpu_hours": 10,
                                                          "deadline_on_residual": True}}]})
    goal = json.loads(records(on_residual, 3600.0, {"science": 20.0})[0].goal)
    # the work on the residual alone, in whole jobs: 18 jobs of 2 vCPUs, 10 at once, 2 waves of
    # 1000 s (W over the residual, 1800 s, would ask for a 2.8th job at once)
    assert goal["deadline_s"] == pytest.approx(3600 + 2 * 1000)
    goal = json.loads(records(on_residual, 3600.0, {"science": 100.0})[0].goal)
    assert goal["deadline_s"] == pytest.approx(3600 + 2 * 1000)   # its upper bound (32 vCPUs) holds 16 at once
    goal = json.loads(records(on_residual, 3600.0, {"science": 1.0})[0].goal)
    assert goal["deadline_s"] == pytest.approx(3600 + 1e9)   # no job fits: never
    bare = tenants_config({**tenants_config_data(), "tenants": [
        {**{k: v for k, v in tenants_config_data()["tenants"][2].items() if k != "work"},
         "goal": {"kind": "deadline", "work_vcpu_hours": 10, "deadline_on_residual": True}}]})
    goal = json.loads(records(bare, 3600.0, {"science": 20.0})[0].goal)
    assert goal["deadline_s"] == pytest.approx(3600 + 10 / 20 * 3600)   # no jobs: W on the residual alone
