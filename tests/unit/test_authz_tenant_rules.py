"""The tenant-admin role without a controller: its identity (TENANT/PERSON), the authorization
table for it over every method of both services, the pure rules that keep its calls to its own
tenant (gleaner_common.authz), and the interceptor refusing a denial raised by the service as it
refuses one by role, on a real gRPC server with mutual TLS."""
from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from gleaner_common import authz, pki
from gleaner_common.authz import (FILTER, LOCAL, OBJECT, OWNER, TABLE, TENANT_SCOPES, Authorizer, Denied, Rule,
                                  check_tenant, request_owner, same_tenant, tenant_scoped, visible)
from gleaner_common.identity import Identity, NotAnIdentity, Role, parse_uri, spiffe_uri, tenant_admin_name
from gleaner_common.ids import InvalidField
from gleaner_common.rpc import ServerSettings, client_channel, start_server
from protos import agent_pb2, controller_pb2
from tests.agentproc import REPO

C = "/gleaner.controller.v1.Controller/"
# What a tenant-admin may call, and how the service keeps each call to its tenant: nothing else.
TENANT_ADMIN_MAY = {f"{C}RequestVm": OWNER, f"{C}CancelRequest": OBJECT, f"{C}Release": OBJECT,
                    f"{C}ListVms": FILTER, f"{C}ListTenants": FILTER, f"{C}SetTenantBackfill": OBJECT,
                    f"{C}SetTenantGoal": OBJECT}
HEALTH = {"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch"}   # liveness, for every identity

ACME_BOB = Identity(Role.TENANT_ADMIN, "acme/bob", 7)
BETA_CAROL = Identity(Role.TENANT_ADMIN, "beta/carol", 8)
OTHERS = [Identity(Role.ADMIN, "alice"), Identity(Role.VIEWER, "vic"), Identity(Role.AGENT, "node1"),
          Identity(Role.CONTROLLER, "main"), LOCAL]


def every_method() -> set[str]:
    """Every method both services define, and every method the table names."""
    methods = {f"/{service.full_name}/{m.name}" for descriptor in (agent_pb2.DESCRIPTOR, controller_pb2.DESCRIPTOR)
               for service in descriptor.services_by_name.values() for m in service.methods}
    return methods | set(TABLE)


# -- the identity -------------------------------------------------------------------------------

def test_a_tenant_admin_names_its_tenant_and_its_person():
    uri = spiffe_uri(Role.TENANT_ADMIN, tenant_admin_name("acme", "bob@example.org"))
    assert uri == "spiffe://gleaner/tenant-admin/acme/bob@example.org"
    role, name = parse_uri(uri)
    who = Identity(role, name, 1)
    assert (who.tenant, who.person, str(who)) == ("acme", "bob@example.org", "tenant-admin/acme/bob@example.org")
    for other in OTHERS:   # only a tenant-admin has a tenant
        assert other.tenant == "" and other.person == other.name


@pytest.mark.parametrize("tail", ["acme", "acme/", "/bob", "acme/bob/x", "ac me/bob", "acme/-bob", "", "a" * 65 + "/b",
                                  "acme/bob\n", "../bob"])
def test_a_tenant_admin_uri_without_exactly_a_tenant_and_a_person_is_no_identity(tail):
    with pytest.raises(NotAnIdentity):
        parse_uri(f"spiffe://gleaner/tenant-admin/{tail}")


def test_the_names_are_checked_as_owners_are():
    with pytest.raises(InvalidField, match="tenant"):
        tenant_admin_name("ac/me", "bob")
    with pytest.raises(InvalidField, match="person"):
        tenant_admin_name("acme", "")
    with pytest.raises(InvalidField):   # a person of another role may not carry a '/'
        spiffe_uri(Role.ADMIN, "acme/bob")


# -- the table, over every method -----------------------------------------------------------------

@pytest.mark.parametrize("method", sorted(every_method()))
def test_the_table_allows_a_tenant_admin_only_its_own_calls(method):
    authorizer = Authorizer()
    for who in (ACME_BOB, BETA_CAROL):
        if method in TENANT_ADMIN_MAY or method in HEALTH:
            assert authorizer.authorize(who, method) is TABLE[method]
        else:
            with pytest.raises(Denied) as denied:
                authorizer.authorize(who, method)
            assert denied.value.code == grpc.StatusCode.PERMISSION_DENIED
            assert f"{who} may not call {method}" in str(denied.value)   # who: person and tenant, and the call


@pytest.mark.parametrize("method", sorted(every_method()))
def test_every_call_a_tenant_admin_may_make_says_how_it_is_kept_to_its_tenant(method):
    rule = TABLE.get(method)
    if rule is None:
        return
    assert rule.tenant in TENANT_SCOPES | {""}
    if Role.TENANT_ADMIN in rule.roles and method not in HEALTH:
        assert rule.tenant == TENANT_ADMIN_MAY[method]
    if rule.tenant:   # a scope means a tenant-admin may call it; nothing else carries one
        assert Role.TENANT_ADMIN in rule.roles


def test_the_other_roles_keep_what_they_had():
    """The tenant-admin added beside admins and people, nowhere taken from them."""
    for method, rule in TABLE.items():
        if method in TENANT_ADMIN_MAY:
            assert rule.roles - {Role.TENANT_ADMIN} in (authz.ADMINS, authz.PEOPLE)
    assert not any(Role.TENANT_ADMIN in rule.roles for method, rule in TABLE.items()
                   if method.startswith(authz.AGENT_API))


# -- the pure rules, over every kind of caller ------------------------------------------------------

TENANTS = ["acme", "beta", "default", "backfill", "acme2"]


@pytest.mark.parametrize("who,tenant", list(itertools.product([ACME_BOB, BETA_CAROL, *OTHERS], TENANTS)))
def test_a_tenant_admin_acts_and_sees_its_own_tenant_only(who, tenant):
    mine = who.role is Role.TENANT_ADMIN and who.tenant == tenant
    assert same_tenant(who, tenant) is mine
    assert tenant_scoped(who) is (who.role is Role.TENANT_ADMIN)
    # the other roles: what the table allowed them, on any tenant
    assert visible(who, tenant) is (mine or not tenant_scoped(who))
    if visible(who, tenant):
        check_tenant(who, tenant, "lease od-1")
    else:
        with pytest.raises(Denied) as denied:
            check_tenant(who, tenant, "lease od-1")
        message = str(denied.value)
        assert denied.value.code == grpc.StatusCode.PERMISSION_DENIED
        assert str(who) in message and f"tenant {tenant!r}" in message and "lease od-1" in message


@pytest.mark.parametrize("who", [ACME_BOB, BETA_CAROL, *OTHERS])
@pytest.mark.parametrize("owner", ["", "acme", "beta", "alice", "default"])
def test_a_tenant_admins_request_is_its_tenants(who, owner):
    if not tenant_scoped(who):
        assert request_owner(who, owner) == owner   # as asked: the table decided already
    elif owner in ("", who.tenant):
        assert request_owner(who, owner) == who.tenant
    else:
        with pytest.raises(Denied) as denied:
            request_owner(who, owner)
        assert denied.value.code == grpc.StatusCode.PERMISSION_DENIED
        assert str(who) in str(denied.value) and repr(owner) in str(denied.value)   # names both


# -- the interceptor: a denial raised by the service is refused and counted as one by role ------------

def test_a_denial_raised_by_the_service_is_refused_named_and_counted(tmp_path):
    lab = pki.ensure_lab_pki(tmp_path / "pki", ("node1",))
    bob = pki.issue(lab.directory, Role.TENANT_ADMIN, "acme/bob")
    method = "/gleaner.test.Tenant/Touch"

    def touch(request: bytes, _context) -> bytes:   # a service keeping the caller to tenant `request`
        check_tenant(authz.current_identity(), request.decode(), "the thing")
        return b"done"
    handlers = {"Touch": grpc.unary_unary_rpc_method_handler(touch)}
    settings = ServerSettings("127.0.0.1:0", lab.agent("node1"), authz.DenyList(lab.deny_list), authz.Limits(),
                              workers=4)
    running = start_server(settings, "gleaner.test", lambda server: server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("gleaner.test.Tenant", handlers),)),
        {method: Rule(authz.ADMINS_AND_TENANT, tenant=OBJECT)})
    try:
        with client_channel(f"127.0.0.1:{running.port}", bob) as channel:
            call = channel.unary_unary(method)
            assert call(b"acme", timeout=5) == b"done"
            with pytest.raises(grpc.RpcError) as err:
                call(b"beta", timeout=5)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert err.value.details() == ("tenant-admin/acme/bob acts for tenant 'acme' only: the thing is tenant "
                                       f"'beta''s ({method})")
        # counted for the audit log (rpc.denied), as a denial by role is: who, which call, why
        assert running.authorizer.denials.flush() == [("tenant-admin/acme/bob", method, err.value.details(), 1)]
    finally:
        running.stop(0)


# -- gleanctl pki ---------------------------------------------------------------------------------

def gleanctl_pki(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "controller.gleanctl", "--json", "pki", *args], capture_output=True,
                          text=True, cwd=REPO)


def test_gleanctl_pki_issues_and_signs_a_tenant_admin_for_the_identity_asked(tmp_path):
    ca, node = tmp_path / "ca", tmp_path / "node"
    assert gleanctl_pki("init", str(ca)).returncode == 0
    issued = json.loads(gleanctl_pki("issue", str(ca), "tenant-admin", "acme", "bob").stdout)
    cert = x509.load_pem_x509_certificate((ca / "tenant-admin-acme+bob.pem").read_bytes())
    assert issued["cert"] == str(ca / "tenant-admin-acme+bob.pem")
    assert pki.identity_of_certificate(cert).uri == "spiffe://gleaner/tenant-admin/acme/bob"
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "acme/bob"
    assert not cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName)   # it serves nothing
    # a request made on the person's machine is signed only for the identity it asks for
    csr = json.loads(gleanctl_pki("request", str(node), "tenant-admin", "beta", "carol").stdout)["csr"]
    for wrong in (["tenant-admin", "acme", "carol"], ["tenant-admin", "beta", "dave"], ["admin", "carol"]):
        refused = gleanctl_pki("sign", str(ca), csr, *wrong)
        assert refused.returncode == 2 and "asks for tenant-admin/beta/carol" in refused.stderr, refused.stderr
        assert not (node / "tenant-admin-beta+carol.pem").exists()
    signed = json.loads(gleanctl_pki("sign", str(ca), csr, "tenant-admin", "beta", "carol").stdout)
    assert pki.describe(Path(signed["cert"]))["name"] == "beta/carol"
    # both halves are needed, each a valid name; other roles take no PERSON
    for args, says in ((["tenant-admin", "acme"], "is not TENANT/PERSON"), (["tenant-admin", "acme", "b/c"], "person"),
                       (["admin", "acme", "bob"], "only a tenant-admin takes a PERSON")):
        refused = gleanctl_pki("issue", str(ca), *args)
        assert refused.returncode == 2 and says in refused.stderr, refused.stderr
    assert sorted(e["name"] for e in json.loads(gleanctl_pki("list", str(ca)).stdout)["certificates"]) == \
        ["acme/bob", "beta/carol", "ca"]
