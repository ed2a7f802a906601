"""Tenants in the store, the API and gleanctl (issue 26, items 1-5 of the tenants brief), against a
real controller process over mutual TLS. The pool is one stand-in node, 8 vCPUs and 16384 MiB,
whose reports come over a real report stream with the node's identity; its agent is a real gRPC
server that answers launches and stops at once (tests/fake_agents.py), so on-demand VMs run
without libvirt. Every refused call is checked to leave the tenants and the audit log as they were.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import grpc
import pytest

from protos import controller_pb2
from tests.agentproc import REPO, TEST_PREFIX, LabEnv, wait_for
from tests.controllerproc import ControllerProcess, reporting_node, rpc_code
from tests.fake_agents import serve_fake_agent, stop_fake_agent

NODE, RBT_NODE = "tenant-node", "rbt-node"
CPUS, MIB = 8, 16384
VM_VCPUS, VM_MIB = 1, 256


def node_report(node: str, address: str, agent=None, prefix: str = "") -> controller_pb2.NodeReport:
    """The stand-in node's report: the VMs its fake agent launched and has not stopped run there."""
    vms = []
    if agent is not None:
        stopped = {name for method, name, _t in agent.calls.started if method == "stop"}
        for name in dict.fromkeys(n for m, n, _t in agent.calls.started if m == "launch" and n not in stopped):
            vms.append(controller_pb2.ReportedVm(
                name=name, lease_id=name[len(prefix):], role="on_demand", vm_role=controller_pb2.VM_ROLE_ON_DEMAND,
                state="running", vcpus=VM_VCPUS, memory_mib=VM_MIB, launched_at=time.time() - 1, image="tiny"))
    return controller_pb2.NodeReport(node_id=node, agent_address=address, cpus=CPUS, memory_mib=MIB, images=["tiny"],
                                     min_memory_mib=32, sent_at=time.time(), agent_version="test", vms=vms)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return LabEnv.in_dir(tmp_path_factory.mktemp("tenants-api"), nodes=(NODE, RBT_NODE))


@contextmanager
def fake_node_controller(env: LabEnv, name: str, node: str = NODE) -> Iterator[ControllerProcess]:
    """A controller process named `name` with `node` reporting through a quick fake agent (the
    VMs it launches run there: node_report)."""
    agent, server = serve_fake_agent(env.pki, node, hung=False)
    controller = ControllerProcess(env, name=name).start()
    prefix = f"{TEST_PREFIX}{controller.name}-"
    report = lambda: node_report(node, f"127.0.0.1:{server.port}", agent, prefix)   # noqa: E731
    try:
        with reporting_node(controller, node, report):
            yield controller
    finally:
        controller.stop()
        stop_fake_agent(agent, server)


@pytest.fixture(scope="module")
def controller(env):
    """A controller at the default [tenants] (rbt 1, urr 1) with the node and its quick fake agent."""
    with fake_node_controller(env, "tenants-ctl") as controller:
        yield controller


def gleanctl(controller: ControllerProcess, *args: str, tls=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "controller.gleanctl", *controller.gleanctl_args(tls), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=90)


def tenants(controller: ControllerProcess) -> dict[str, controller_pb2.Tenant]:
    reply = controller.stub().ListTenants(controller_pb2.ListTenantsRequest(), timeout=10)
    return {t.name: t for t in reply.tenants}


def books(controller: ControllerProcess) -> tuple:
    """What a refused call must leave alone: every tenant as stored, and the tenant audit events."""
    stored = sorted((t.name, t.kind, t.lower_vcpus, t.lower_memory_mib, t.upper_vcpus, t.upper_memory_mib,
                     t.created_at) for t in tenants(controller).values())
    events = [e.seq for kind in ("tenant.created", "tenant.changed", "tenant.deleted") for e in controller.events(kind)]
    return stored, sorted(events)


# -- 1. stored, audited, shown ------------------------------------------------------------------

def test_a_created_tenant_is_stored_audited_with_who_and_shown(controller):
    done = gleanctl(controller, "tenant", "create", "alpha", "--kind", "on-demand", "--lower", "2,2048",
                    "--upper", "4,4096")
    assert done.returncode == 0, done.stderr
    assert "created tenant alpha (on-demand): lower 2,2048, upper 4,4096" in done.stdout
    (event,) = controller.events("tenant.created")
    detail = json.loads(event.detail_json)
    assert detail.pop("by").startswith("admin/")   # who did it
    assert detail == {"tenant": "alpha", "kind": "on_demand", "lower": "2,2048", "upper": "4,4096"}

    shown = gleanctl(controller, "tenant", "show")
    assert shown.returncode == 0, shown.stderr
    header, *rows = shown.stdout.splitlines()
    assert header.split() == ["NAME", "KIND", "LOWER(VCPUS,MIB)", "UPPER(VCPUS,MIB)", "USED(VCPUS,MIB)", "VMS",
                              "BUILT_IN", "CREATED", "PROGRESS", "GOAL"]
    cells = {row.split()[0]: row.split() for row in rows if not row.startswith("pool:")}
    assert cells["alpha"][1:5] == ["on-demand", "2,2048", "4,4096", "0,0"]
    assert cells["default"][1:4] == ["on-demand", "0,0", "unbounded"] and cells["default"][6] == "yes"
    assert cells["backfill"][1:4] == ["batch", "0,0", "unbounded"]
    backfill = gleanctl(controller, "tenant", "show", "backfill")
    assert "backfill settings: the pool-wide ones (gleanctl backfill show)" in backfill.stdout, backfill.stdout
    assert "pool: 8 vCPUs, 16384 MiB up; the bounded upper bounds book 4 vCPUs, 4096 MiB of capacity x RBT 1" \
        in shown.stdout

    data = json.loads(gleanctl(controller, "tenant", "show", "alpha", "-o", "json").stdout)
    (alpha,) = data["tenants"]
    assert (alpha["kind"], alpha["lower_vcpus"], alpha["lower_memory_mib"], alpha["upper_vcpus"],
            alpha["upper_memory_mib"]) == ("on_demand", 2, 2048, 4, 4096)
    assert data["rbt"] == 1.0 and data["urr"] == 1.0 and data["capacity_vcpus"] == CPUS

    status = gleanctl(controller, "status")
    assert status.returncode == 0, status.stderr
    assert "tenants    2 on-demand, 1 batch; upper bounds book 4/8 vCPUs, 4096/16384 MiB (capacity x RBT 1)" \
        in status.stdout, status.stdout


def test_set_and_delete_are_audited_and_a_viewer_may_only_read(controller):
    assert gleanctl(controller, "tenant", "create", "beta", "--kind", "batch", "--upper", "1,1024").returncode == 0
    done = gleanctl(controller, "tenant", "set", "beta", "--lower", "1,512")
    assert done.returncode == 0, done.stderr
    (changed,) = [e for e in controller.events("tenant.changed") if json.loads(e.detail_json)["tenant"] == "beta"]
    detail = json.loads(changed.detail_json)
    assert (detail["lower"], detail["upper"], detail["before_lower"], detail["by"][:6]) == \
        ("1,512", "1,1024", "0,0", "admin/")

    viewer = controller.env.pki.viewer
    before = books(controller)
    refused = gleanctl(controller, "tenant", "delete", "beta", tls=viewer)
    assert refused.returncode == 3 and "may not call" in refused.stderr
    assert books(controller) == before
    assert gleanctl(controller, "tenant", "show", "beta", tls=viewer).returncode == 0

    assert gleanctl(controller, "tenant", "delete", "beta").returncode == 0
    assert "beta" not in tenants(controller)
    (deleted,) = [e for e in controller.events("tenant.deleted") if json.loads(e.detail_json)["tenant"] == "beta"]
    assert json.loads(deleted.detail_json)["by"].startswith("admin/")
    assert gleanctl(controller, "tenant", "show", "beta").returncode == 4


# -- 2. admission ---------------------------------------------------------------------------------

def ensure_alpha(controller: ControllerProcess) -> None:
    """Tenant alpha as the first test makes it, made here when a later test runs without it (-k)."""
    if "alpha" not in tenants(controller):
        done = gleanctl(controller, "tenant", "create", "alpha", "--kind", "on-demand", "--lower", "2,2048",
                        "--upper", "4,4096")
        assert done.returncode == 0, done.stderr


def test_an_upper_bound_past_capacity_times_rbt_is_refused_naming_both_figures(controller):
    ensure_alpha(controller)
    # the figures below count on alpha being the one tenant with an upper bound, 4 of the 8 vCPUs
    bounded = {name: (t.upper_vcpus, t.upper_memory_mib) for name, t in tenants(controller).items() if t.upper_vcpus}
    assert bounded == {"alpha": (4, 4096)}, bounded
    before = books(controller)
    done = gleanctl(controller, "tenant", "create", "gamma", "--kind", "on-demand", "--upper", "5,1024")
    assert done.returncode == 1, done.stderr
    assert "the upper bounds would sum to 9 vCPUs, 5120 MiB, over capacity 8 vCPUs, 16384 MiB x RBT 1 = " \
           "8 vCPUs, 16384 MiB" in done.stderr, done.stderr
    assert "the lower bound 0 vCPUs, 0 MiB fits in what is idle" in done.stderr
    assert books(controller) == before
    # a set that books more is admitted the same way; one that takes nothing more always passes
    done = gleanctl(controller, "tenant", "set", "alpha", "--upper", "9,4096")
    assert done.returncode == 1 and "over capacity" in done.stderr, done.stderr
    assert books(controller) == before
    assert gleanctl(controller, "tenant", "create", "gamma", "--kind", "on-demand", "--upper", "4,1024").returncode == 0
    assert gleanctl(controller, "tenant", "delete", "gamma").returncode == 0


def test_a_lower_bound_that_does_not_fit_what_is_idle_is_refused(env):
    """At rbt 2 the upper bounds may book 16 vCPUs of 8: admission then turns on the lower bounds."""
    controller = ControllerProcess(env, name="rbt-ctl", settings=dict(tenants_rbt=2.0)).start()
    report = lambda: node_report(RBT_NODE, "127.0.0.1:9")   # noqa: E731
    try:
        with reporting_node(controller, RBT_NODE, report):
            first = gleanctl(controller, "tenant", "create", "big", "--kind", "on-demand", "--lower", "6,8192",
                             "--upper", "12,16384")
            assert first.returncode == 0, first.stderr   # 12 vCPUs booked: within 8 x 2, not within 8 x 1
            before = books(controller)
            done = gleanctl(controller, "tenant", "create", "small", "--kind", "batch", "--lower", "3,1024",
                            "--upper", "3,1024")
            assert done.returncode == 1
            assert "the lower bound 3 vCPUs, 1024 MiB does not fit in what is idle, 2 vCPUs, 8192 MiB" in done.stderr
            assert "the upper bounds would sum to 15 vCPUs, 17408 MiB, within capacity 8 vCPUs, 16384 MiB x RBT 2" \
                in done.stderr, done.stderr
            assert books(controller) == before
            assert gleanctl(controller, "tenant", "create", "small", "--kind", "batch", "--lower", "2,1024",
                            "--upper", "3,1024").returncode == 0
            assert "RBT 2)" in gleanctl(controller, "status").stdout
    finally:
        controller.stop()


# -- 3. the built-in tenants ----------------------------------------------------------------------

def test_the_built_in_tenants_cannot_be_deleted_but_their_bounds_may_be_set(controller):
    for name in ("default", "backfill"):
        before = books(controller)
        done = gleanctl(controller, "tenant", "delete", name)
        assert done.returncode == 1 and f"tenant {name!r} is built in and cannot be deleted" in done.stderr
        assert books(controller) == before
    assert gleanctl(controller, "tenant", "create", "default", "--kind", "on-demand", "--upper", "1,1").returncode == 1
    done = gleanctl(controller, "tenant", "set", "default", "--lower", "1,1024", "--upper", "2,2048")
    assert done.returncode == 0, done.stderr
    assert (tenants(controller)["default"].upper_vcpus, tenants(controller)["default"].lower_memory_mib) == (2, 1024)
    done = gleanctl(controller, "tenant", "set", "default", "--lower", "0,0", "--upper", "unbounded")
    assert done.returncode == 0 and "upper unbounded" in done.stdout, done.stderr
    default = tenants(controller)["default"]
    assert (default.upper_vcpus, default.upper_memory_mib, default.lower_vcpus) == (0, 0, 0)


# -- 4. delete with live VMs ----------------------------------------------------------------------

def request(controller: ControllerProcess, owner: str, request_id: str) -> controller_pb2.VmRequestResult:
    reply = controller.stub().RequestVm(controller_pb2.VmRequest(vcpus=VM_VCPUS, memory_mib=VM_MIB, image="tiny",
                                                                 owner=owner, request_id=request_id), timeout=60)
    assert reply.outcome == "placed", reply.reason
    return reply


def test_a_tenant_with_live_vms_is_kept_naming_them_and_drain_releases_them_first(controller):
    assert gleanctl(controller, "tenant", "create", "delta", "--kind", "on-demand", "--upper", "2,2048").returncode == 0
    mine = request(controller, "delta", "req-delta-1").lease.lease_id
    other = request(controller, "someone", "req-someone-1").lease.lease_id   # not a tenant's name: default's
    wait_for(lambda: {l.lease_id: l.state for l in controller.leases()}.get(mine) == "running", 20, "delta's VM")
    rows = tenants(controller)
    assert list(rows["delta"].lease_ids) == [mine] and (rows["delta"].used_vcpus, rows["delta"].used_memory_mib) == \
        (VM_VCPUS, VM_MIB)
    assert other in rows["default"].lease_ids

    before = books(controller)
    done = gleanctl(controller, "tenant", "delete", "delta")
    assert done.returncode == 1 and f"tenant 'delta' has 1 live VM(s): {mine}" in done.stderr, done.stderr
    assert books(controller) == before and mine in {l.lease_id for l in controller.leases()}

    done = gleanctl(controller, "tenant", "delete", "delta", "--drain")
    assert done.returncode == 0, done.stderr
    assert f"deleted tenant delta after releasing {mine}" in done.stdout
    live = {l.lease_id for l in controller.leases()}
    assert mine not in live and other in live   # only the tenant's own VMs went
    released = [e for e in controller.events("vm.released") if e.lease_id == mine]
    deleted = [e for e in controller.events("tenant.deleted") if json.loads(e.detail_json)["tenant"] == "delta"]
    assert released and deleted and released[0].seq < deleted[0].seq
    assert json.loads(deleted[0].detail_json)["drained"] == mine
    controller.stub().Release(controller_pb2.ReleaseRequest(lease_id=other), timeout=60)


# -- 5. bad input ---------------------------------------------------------------------------------

@pytest.mark.parametrize("args, words", [
    (("create", "bad;name", "--kind", "batch", "--upper", "1,1"), "invalid argument name: 'bad;name' is not valid"),
    (("create", "eps", "--kind", "spot", "--upper", "1,1"), "argument --kind: invalid choice: 'spot'"),
    (("create", "eps", "--kind", "batch", "--upper", "1"), "invalid argument upper: '1' is not CPUS,MIB"),
    (("create", "eps", "--kind", "batch", "--upper", "1,-5"), "invalid argument upper: '1,-5' is not CPUS,MIB"),
    (("create", "eps", "--kind", "batch", "--upper", "0,1024"), "invalid argument upper vCPUs: 0 is outside 1.."),
    (("create", "eps", "--kind", "batch", "--lower", "2,1024", "--upper", "1,1024"),
     "invalid argument lower: 2,1024 is above the upper bound 1,1024"),
    (("create", "eps", "--kind", "batch", "--upper", "unbounded"), "invalid argument upper: 'unbounded' is not"),
    (("set", "alpha"), "tenant set alpha needs --lower CPUS,MIB or --upper CPUS,MIB"),
    (("set", "alpha", "--lower", "x,y"), "invalid argument lower: 'x,y' is not CPUS,MIB"),
])
def test_bad_input_is_a_usage_error_naming_the_field_and_changes_nothing(controller, args, words):
    before = books(controller)
    done = gleanctl(controller, "tenant", *args)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert words in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert books(controller) == before


@pytest.mark.parametrize("request_, field", [
    (controller_pb2.CreateTenantRequest(name="", kind="batch", upper_vcpus=1, upper_memory_mib=1), "name:"),
    (controller_pb2.CreateTenantRequest(name="x" * 65, kind="batch", upper_vcpus=1, upper_memory_mib=1), "name:"),
    (controller_pb2.CreateTenantRequest(name="eps", kind="spot", upper_vcpus=1, upper_memory_mib=1), "kind:"),
    (controller_pb2.CreateTenantRequest(name="eps", kind="batch"), "upper:"),
    (controller_pb2.CreateTenantRequest(name="eps", kind="batch", lower_vcpus=3, upper_vcpus=2, upper_memory_mib=9),
     "lower:"),
    (controller_pb2.CreateTenantRequest(name="eps", kind="batch", upper_vcpus=2**31, upper_memory_mib=9),
     "upper vCPUs:"),
    (controller_pb2.SetTenantRequest(name="alpha", upper_vcpus=0), "upper vCPUs:"),
    (controller_pb2.SetTenantRequest(name="alpha", lower_vcpus=5), "lower:"),
])
def test_the_controller_checks_what_gleanctl_would_have(controller, request_, field):
    """The same rules hold for any client: INVALID_ARGUMENT naming the field, nothing stored."""
    ensure_alpha(controller)   # the set cases name it: without it they would be NOT_FOUND
    before = books(controller)
    stub = controller.stub()
    call = stub.CreateTenant if isinstance(request_, controller_pb2.CreateTenantRequest) else stub.SetTenant
    with pytest.raises(grpc.RpcError) as raised:
        call(request_, timeout=10)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT and raised.value.details().startswith(field), \
        raised.value.details()
    assert books(controller) == before


def test_unknown_tenants_are_not_found(controller):
    before = books(controller)
    for args in (("show", "nobody"), ("set", "nobody", "--upper", "1,1"), ("delete", "nobody")):
        done = gleanctl(controller, "tenant", *args)
        assert done.returncode == 4 and "no tenant 'nobody'" in done.stderr, (args, done.stderr)
    assert rpc_code(lambda: controller.stub().DeleteTenant(controller_pb2.DeleteTenantRequest(name="bad name"),
                                                           timeout=10)) == grpc.StatusCode.INVALID_ARGUMENT
    assert books(controller) == before
