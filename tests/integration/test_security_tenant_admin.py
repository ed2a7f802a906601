"""Attacks by a tenant-admin on a real controller process, over real mutual TLS: each is a test
that fails if the attack succeeds, and checks that nothing changed. A tenant-admin of acme may
request, release and read acme's VMs and acme itself; it cannot touch, request as, or see beta,
change the pool's settings or any tenant's bounds, reach an agent, or sign a certificate the pool
accepts. Every denial names the caller (person and tenant) and reaches the audit log.

The agent runs on libvirt's test:/// driver (the controller's RPC, authorization and books are the
same as on a real host; no VM boots)."""
from __future__ import annotations

import datetime
import json
import subprocess
import sys

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from gleaner_common import pki
from gleaner_common.identity import Role, spiffe_uri
from gleaner_common.pki import TlsFiles
from protos import agent_pb2, agent_pb2_grpc, controller_pb2, controller_pb2_grpc
from tests.agentproc import REPO, AgentProcess, LabEnv, wait_for
from tests.controllerproc import ControllerProcess, agent_settings, rpc_code

DENIED = grpc.StatusCode.PERMISSION_DENIED
C = "/gleaner.controller.v1.Controller/"
BOB = "tenant-admin/acme/bob"


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    """A controller, one agent (test:///), tenants acme and beta, and certificates for bob
    (tenant-admin of acme), carol (of beta) and eve (of ghost, a tenant the pool does not have)."""
    env = LabEnv.create()
    controller = ControllerProcess(env, name="tadm").start()
    agent = AgentProcess(env, name="tadm-n1", settings=agent_settings(
        controller, libvirt_uri="test:///default", metrics_listen="")).start()
    try:
        wait_for(lambda: controller.node_state("tadm-n1") == "up", 30, "the node to report")
        admin = controller.stub()
        for name in ("acme", "beta"):
            admin.CreateTenant(controller_pb2.CreateTenantRequest(name=name, kind="on_demand", upper_vcpus=2,
                                                                  upper_memory_mib=1024), timeout=10)
        people = {who: pki.issue(env.pki.directory, Role.TENANT_ADMIN, who)
                  for who in ("acme/bob", "beta/carol", "ghost/eve")}
        yield controller, agent, people
    finally:
        agent.stop()
        controller.stop()
        env.remove()


def stub(controller: ControllerProcess, tls: TlsFiles) -> controller_pb2_grpc.ControllerStub:
    return controller.stub(tls)


def request(s, request_id: str, owner: str = "acme") -> controller_pb2.VmRequestResult:
    return s.RequestVm(controller_pb2.VmRequest(vcpus=1, memory_mib=128, image="tiny", owner=owner,
                                                request_id=request_id), timeout=30)


def denial(call) -> str:
    with pytest.raises(grpc.RpcError) as err:
        call()
    assert err.value.code() == DENIED, (err.value.code(), err.value.details())
    return err.value.details()


def pool_state(controller: ControllerProcess) -> tuple:
    """Everything an attack could change, as the lab admin reads it."""
    admin = controller.stub()
    reserve = admin.GetReserveStatus(controller_pb2.ReserveStatusRequest(), timeout=10)
    tenants = admin.ListTenants(controller_pb2.ListTenantsRequest(), timeout=10)
    return (admin.GetBackfill(controller_pb2.GetBackfillRequest(), timeout=10),
            admin.ListReserves(controller_pb2.ListReservesRequest(), timeout=10), reserve.settings_json,
            list(reserve.hints),
            sorted((l.lease_id, l.owner, l.state) for l in controller.leases()),
            sorted((t.name, t.lower_vcpus, t.lower_memory_mib, t.upper_vcpus, t.upper_memory_mib)
                   for t in tenants.tenants),
            sorted(n.node_id for n in admin.ListNodes(controller_pb2.ListNodesRequest(), timeout=10).nodes))


def by_of(controller: ControllerProcess, kind: str, lease_id: str) -> list[str]:
    return [json.loads(e.detail_json).get("by", "") for e in controller.events(kind) if e.lease_id == lease_id]


def test_a_tenant_admin_requests_reads_and_releases_its_own_tenants_vms(pool):
    controller, _agent, people = pool
    bob = stub(controller, people["acme/bob"])
    placed = request(bob, "tadm-own-1")
    assert placed.outcome == "placed", placed.reason
    assert placed.lease.owner == "acme"   # the request belongs to its tenant
    unnamed = request(bob, "tadm-own-2", owner="")   # no owner: its tenant's
    assert unnamed.outcome == "placed" and unnamed.lease.owner == "acme", unnamed.reason
    assert request(bob, "tadm-own-1").lease.lease_id == placed.lease.lease_id   # its own request again: idempotent
    mine = {l.lease_id for l in bob.ListVms(controller_pb2.ListVmsRequest(), timeout=10).leases}
    assert mine == {placed.lease.lease_id, unnamed.lease.lease_id}
    shown = bob.ListTenants(controller_pb2.ListTenantsRequest(name="acme"), timeout=10).tenants
    assert [(t.name, sorted(t.lease_ids)) for t in shown] == [("acme", sorted(mine))]
    for lease in (placed.lease, unnamed.lease):
        released = bob.Release(controller_pb2.ReleaseRequest(lease_id=lease.lease_id), timeout=30)
        assert released.lease.state in ("stopping", "ended"), released
    wait_for(lambda: not controller.leases(), 30, "acme's VMs to end")
    ended = bob.ListVms(controller_pb2.ListVmsRequest(include_ended=True), timeout=10).leases
    assert {l.lease_id for l in ended} == mine and {l.owner for l in ended} == {"acme"}
    # the audit log names the person and the tenant on every event its calls caused
    for kind in ("request.placed", "vm.stopping"):
        assert by_of(controller, kind, placed.lease.lease_id) == [BOB], kind


def test_a_tenant_admin_cannot_release_request_as_or_see_another_tenant(pool):
    controller, _agent, people = pool
    bob, carol = stub(controller, people["acme/bob"]), stub(controller, people["beta/carol"])
    theirs = request(carol, "tadm-beta-1", owner="beta")
    assert theirs.outcome == "placed" and theirs.lease.owner == "beta", theirs.reason
    before = pool_state(controller)
    lease_id = theirs.lease.lease_id
    for force in (False, True):
        detail = denial(lambda: bob.Release(controller_pb2.ReleaseRequest(lease_id=lease_id, force=force), timeout=30))
        assert BOB in detail and "tenant 'acme' only" in detail and "tenant 'beta'" in detail
        assert f"{C}Release" in detail
    detail = denial(lambda: request(bob, "tadm-as-beta", owner="beta"))
    assert BOB in detail and "'acme'" in detail and "'beta'" in detail   # names both
    # its request id again, as acme: neither beta's answer nor what beta asked for
    detail = denial(lambda: request(bob, "tadm-beta-1"))
    assert "request 'tadm-beta-1' is tenant 'beta'" in detail and "vcpus" not in detail.lower()
    detail = denial(lambda: bob.CancelRequest(controller_pb2.CancelRequestRequest(request_id="tadm-beta-1"),
                                              timeout=10))
    assert "tenant 'beta'" in detail
    # it sees none of beta's VMs, live or ended, nor beta itself
    for ended in (False, True):
        leases = bob.ListVms(controller_pb2.ListVmsRequest(include_ended=ended), timeout=10).leases
        assert lease_id not in {l.lease_id for l in leases} and "beta" not in {l.owner for l in leases}
    assert [t.name for t in bob.ListTenants(controller_pb2.ListTenantsRequest(), timeout=10).tenants] == ["acme"]
    detail = denial(lambda: bob.ListTenants(controller_pb2.ListTenantsRequest(name="beta"), timeout=10))
    assert "tenant 'beta'" in detail
    assert pool_state(controller) == before
    assert [l.state for l in controller.leases() if l.lease_id == lease_id] == ["running"]
    carol.Release(controller_pb2.ReleaseRequest(lease_id=lease_id), timeout=30)   # beta's own: allowed
    wait_for(lambda: not controller.leases(), 30, "beta's VM to end")


def test_a_tenant_admin_of_a_tenant_the_pool_lacks_gets_nothing(pool):
    """Its VMs would be the default tenant's: refused, and it reads nothing."""
    controller, _agent, people = pool
    eve = stub(controller, people["ghost/eve"])
    before = pool_state(controller)
    for owner in ("", "ghost"):
        detail = denial(lambda: request(eve, "tadm-ghost", owner=owner))
        assert "tenant-admin/ghost/eve" in detail and "tenant 'default'" in detail
    assert list(eve.ListTenants(controller_pb2.ListTenantsRequest(), timeout=10).tenants) == []
    assert list(eve.ListVms(controller_pb2.ListVmsRequest(include_ended=True), timeout=10).leases) == []
    assert pool_state(controller) == before


# Every call a tenant-admin may not make, its own tenant's bounds included.
POOL_CALLS = {
    "SetBackfill": lambda s: s.SetBackfill(controller_pb2.SetBackfillRequest(enabled=True, max_instances=9),
                                           timeout=10),
    "SetReserve": lambda s: s.SetReserve(controller_pb2.Reserve(node_id="*", vcpus=3), timeout=10),
    "AddHint": lambda s: s.AddHint(controller_pb2.AddHintRequest(nodes=1, in_hours=1, for_hours=1, label="x"),
                                   timeout=10),
    "CancelHints": lambda s: s.CancelHints(controller_pb2.CancelHintsRequest(), timeout=10),
    "SetReserveSettings": lambda s: s.SetReserveSettings(controller_pb2.SetReserveSettingsRequest(static_nodes=5),
                                                         timeout=10),
    "CreateTenant": lambda s: s.CreateTenant(controller_pb2.CreateTenantRequest(
        name="acme2", kind="on_demand", upper_vcpus=1, upper_memory_mib=512), timeout=10),
    "SetTenant": lambda s: s.SetTenant(controller_pb2.SetTenantRequest(name="acme", upper_vcpus=3), timeout=10),
    "DeleteTenant": lambda s: s.DeleteTenant(controller_pb2.DeleteTenantRequest(name="beta", drain=True), timeout=10),
    "ListNodes": lambda s: s.ListNodes(controller_pb2.ListNodesRequest(), timeout=10),
    "GetBackfill": lambda s: s.GetBackfill(controller_pb2.GetBackfillRequest(), timeout=10),
    "ListReserves": lambda s: s.ListReserves(controller_pb2.ListReservesRequest(), timeout=10),
    "GetReserveStatus": lambda s: s.GetReserveStatus(controller_pb2.ReserveStatusRequest(), timeout=10),
    "ListEvents": lambda s: s.ListEvents(controller_pb2.ListEventsRequest(), timeout=10),
    "FollowEvents": lambda s: list(s.FollowEvents(controller_pb2.FollowEventsRequest(max_seconds=1), timeout=10)),
    "Status": lambda s: s.Status(controller_pb2.StatusRequest(), timeout=10),
    "Report": lambda s: s.Report(iter([controller_pb2.NodeReport(node_id="tadm-n1")]), timeout=10),
}


def test_a_tenant_admin_cannot_change_the_pool_nor_any_tenants_bounds(pool):
    controller, _agent, people = pool
    bob = stub(controller, people["acme/bob"])
    before = pool_state(controller)
    for method, call in POOL_CALLS.items():
        detail = denial(lambda: call(bob))
        assert f"{BOB} may not call {C}{method}" in detail, detail
    assert pool_state(controller) == before


def test_a_tenant_admin_cannot_reach_an_agent(pool):
    _controller, agent, people = pool
    with agent.channel(people["acme/bob"]) as channel:
        s = agent_pb2_grpc.NodeAgentStub(channel)
        for call in (lambda: s.ListDomains(agent_pb2.ListDomainsRequest(), timeout=10),
                     lambda: s.TerminateDomain(agent_pb2.TerminateDomainRequest(name="gtest-x"), timeout=10)):
            assert BOB in denial(call)


def forged_by(signer: TlsFiles, out, role: Role, name: str) -> TlsFiles:
    """A certificate for (role, name) signed with a tenant-admin's own key, as if it were a CA,
    presented with the tenant-admin's certificate as its chain."""
    key = ec.generate_private_key(ec.SECP256R1())
    signer_cert = x509.load_pem_x509_certificate(signer.cert.read_bytes())
    signer_key = serialization.load_pem_private_key(signer.key.read_bytes(), password=None)
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(x509.Name([])).issuer_name(signer_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.UniformResourceIdentifier(spiffe_uri(role, name))]),
                           critical=False)
            .sign(signer_key, hashes.SHA256()))
    files = TlsFiles(signer.ca, out / "forged.pem", out / "forged.key")
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM) + signer.cert.read_bytes())
    files.key.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                            serialization.NoEncryption()))
    return files


def test_a_tenant_admin_cannot_sign_certificates(pool, tmp_path):
    """Its certificate is no CA (`pki` issues every certificate with CA:FALSE): one it signs with
    its own key (an admin, another tenant's admin) is refused at the handshake; nothing changes."""
    controller, _agent, people = pool
    before = pool_state(controller)
    for role, name in ((Role.ADMIN, "mallory"), (Role.TENANT_ADMIN, "beta/mallory")):
        (tmp_path / name.replace("/", "+")).mkdir()
        forged = forged_by(people["acme/bob"], tmp_path / name.replace("/", "+"), role, name)
        for call in (lambda s: request(s, "tadm-forged", owner="beta"), POOL_CALLS["SetBackfill"]):
            code = rpc_code(lambda: call(stub(controller, forged)))
            assert code == grpc.StatusCode.UNAVAILABLE, code   # the TLS handshake fails: no call is made
    assert pool_state(controller) == before


def test_a_tenant_admins_reply_names_no_other_tenants_vm_it_preempted():
    """A node full of backfill (the built-in batch tenant's): bob's request preempts one of them;
    the admin asking after the same request sees the victim, bob's reply names none."""
    env = LabEnv.create()
    controller = ControllerProcess(env, name="tadm-bf", settings=dict(use_prediction=False, notice_seconds=5)).start()
    agent = AgentProcess(env, name="tadm-bf-n1", settings=agent_settings(
        controller, libvirt_uri="test:///default", metrics_listen="")).start()
    try:
        wait_for(lambda: controller.node_state("tadm-bf-n1") == "up", 30, "the node to report")
        admin = controller.stub()
        admin.CreateTenant(controller_pb2.CreateTenantRequest(name="acme", kind="on_demand", upper_vcpus=2,
                                                              upper_memory_mib=1024), timeout=10)
        bob = stub(controller, pki.issue(env.pki.directory, Role.TENANT_ADMIN, "acme/bob"))
        admin.SetBackfill(controller_pb2.SetBackfillRequest(enabled=True, memory_mb=128, interruption="terminate",
                                                            grace_seconds=1), timeout=10)

        def full() -> bool:
            node = admin.ListNodes(controller_pb2.ListNodesRequest(), timeout=10).nodes[0]
            return node.allocated_vcpus >= node.cpus and len(controller.leases("backfill", "running")) == node.cpus
        wait_for(full, 60, "backfill to fill the node")
        placed = request(bob, "tadm-bf-1")
        assert placed.outcome == "placed" and placed.lease.owner == "acme", placed.reason
        assert list(placed.preempted) == []
        seen_by_admin = request(admin, "tadm-bf-1")   # the same request, asked again by an admin
        assert seen_by_admin.lease.lease_id == placed.lease.lease_id and len(seen_by_admin.preempted) == 1
    finally:
        agent.stop()
        controller.stop()
        env.remove()


def gleanctl(controller: ControllerProcess, tls: TlsFiles, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "controller.gleanctl", *controller.gleanctl_args(tls), "--json",
                           *args], capture_output=True, text=True, cwd=REPO, timeout=60)


def test_gleanctl_as_a_tenant_admin(pool):
    """The commands a tenant-admin has work as it; gleanctl's default owner (admin) is refused,
    saying what to give; the others exit 3 (permission denied)."""
    controller, _agent, people = pool
    bob = people["acme/bob"]
    refused = gleanctl(controller, bob, "request", "--vcpus", "1", "--memory", "128")
    assert refused.returncode == 3 and "give owner 'acme'" in refused.stderr, refused.stderr
    placed = gleanctl(controller, bob, "request", "--vcpus", "1", "--memory", "128", "--owner", "acme")
    assert placed.returncode == 0, placed.stderr
    lease_id = json.loads(placed.stdout)["lease"]["lease_id"]
    vms = gleanctl(controller, bob, "vms")
    assert vms.returncode == 0 and [l["lease_id"] for l in json.loads(vms.stdout)] == [lease_id]
    shown = gleanctl(controller, bob, "tenant", "show", "acme")
    assert shown.returncode == 0 and [t["name"] for t in json.loads(shown.stdout)["tenants"]] == ["acme"]
    for args in (["status"], ["nodes"], ["tenant", "show", "beta"], ["backfill", "show"]):
        assert gleanctl(controller, bob, *args).returncode == 3, args
    assert gleanctl(controller, bob, "release", lease_id).returncode == 0
    wait_for(lambda: not controller.leases(), 30, "the VM to end")


def test_every_denial_reaches_the_audit_log_naming_person_and_tenant(pool):
    """Runs last: stopping the controller flushes the denial counts into the audit log."""
    controller, _agent, people = pool
    bob = stub(controller, people["acme/bob"])
    rpc_code(lambda: POOL_CALLS["SetTenant"](bob))
    rpc_code(lambda: request(bob, "tadm-audit", owner="beta"))
    controller.stop()
    controller.start()
    rows = [json.loads(e.detail_json) for e in controller.events("rpc.denied")]
    mine = {(r["method"].rsplit("/", 1)[1], r["reason"]) for r in rows if r["identity"] == BOB}
    methods = {method for method, _why in mine}
    assert {"Release", "RequestVm", "CancelRequest", "ListTenants", *POOL_CALLS} <= methods
    assert any("requests for tenant 'acme' only, not for owner 'beta'" in why for method, why in mine
               if method == "RequestVm")
    assert any("tenant-admin/ghost/eve" == r["identity"] for r in rows)


def test_a_tenant_admin_sets_its_own_batch_tenants_backfill_and_no_other(pool):
    controller, _agent, people = pool
    admin = controller.stub()
    wait_for(lambda: controller.node_state("tadm-n1") == "up", 30, "the node up (admission books its capacity)")
    admin.CreateTenant(controller_pb2.CreateTenantRequest(name="grid", kind="batch", upper_vcpus=1,
                                                          upper_memory_mib=512), timeout=10)
    dan = stub(controller, pki.issue(controller.env.pki.directory, Role.TENANT_ADMIN, "grid/dan"))
    bob = stub(controller, people["acme/bob"])
    own = lambda: {t.name: t.backfill_json for t in admin.ListTenants(controller_pb2.ListTenantsRequest(),   # noqa: E731
                                                                        timeout=10).tenants}
    before = own()
    detail = denial(lambda: bob.SetTenantBackfill(controller_pb2.SetTenantBackfillRequest(
        name="grid", max_instances=9), timeout=10))
    assert "grid" in detail and "acme" in detail, detail
    assert own() == before
    reply = dan.SetTenantBackfill(controller_pb2.SetTenantBackfillRequest(name="grid", max_instances=1,
                                                                          memory_mb=192), timeout=10)
    assert json.loads(reply.backfill_json) == {"max_instances": 1, "memory_mb": 192}
    (event,) = [e for e in controller.events("tenant.changed") if '"backfill"' in e.detail_json]
    assert json.loads(event.detail_json)["by"] == "tenant-admin/grid/dan"
    with pytest.raises(grpc.RpcError) as err:   # acme is on-demand: no backfill of its own
        bob.SetTenantBackfill(controller_pb2.SetTenantBackfillRequest(name="acme", max_instances=1), timeout=10)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
