"""Who is calling: every Gleaner certificate names one identity, a role and a name.

    spiffe://gleaner/controller/NAME      the controller
    spiffe://gleaner/agent/NODE           the node agent of NODE (a DNS label)
    spiffe://gleaner/admin/PERSON         an admin: may change the pool
    spiffe://gleaner/viewer/PERSON        read-only
    spiffe://gleaner/tenant-admin/TENANT/PERSON
                                          a person who administers one tenant's VMs (authz.same_tenant)

A tenant-admin's name is TENANT/PERSON: both follow the owners' rules (gleaner_common.ids.person,
which has no '/'), so the name splits one way only, and str(identity), which every audit event
a call causes carries as "by", says both who and for which tenant.

The identity is a URI subject alternative name (a SPIFFE ID, which gRPC reads itself). Servers
also carry DNS names a client can insist on: an agent's certificate names NODE.agent.gleaner and
the controller's controller.gleaner, so the controller dials an agent only if the certificate
there is that node's, and an agent reports only to a real controller (see server_name_for).
A server certificate also names its own serial (SERIAL.serial.NODE.agent.gleaner, see
pinned_server_name): a client that has checked a serial against its deny list insists on that
name, so the connection it then makes cannot reach another certificate of the same identity.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from enum import Enum

from cryptography import x509

from . import ids

TRUST_DOMAIN = "gleaner"
CONTROLLER_SERVER_NAME = "controller.gleaner"
AGENT_SERVER_SUFFIX = ".agent.gleaner"


class Role(str, Enum):
    CONTROLLER = "controller"
    AGENT = "agent"
    ADMIN = "admin"
    VIEWER = "viewer"
    TENANT_ADMIN = "tenant-admin"


class NotAnIdentity(ValueError):
    """A certificate (or URI) that names no Gleaner identity."""


@dataclass(frozen=True)
class Identity:
    role: Role
    name: str            # the node id for an agent, the person for admin and viewer, TENANT/PERSON for a tenant-admin
    serial: int = 0      # the certificate's serial number, for revocation

    @property
    def tenant(self) -> str:
        """The tenant a tenant-admin administers; "" for every other role."""
        return split_tenant_name(self.name)[0] if self.role is Role.TENANT_ADMIN else ""

    @property
    def person(self) -> str:
        """The person (the node id for an agent, the controller's name for a controller)."""
        return split_tenant_name(self.name)[1] if self.role is Role.TENANT_ADMIN else self.name

    @property
    def uri(self) -> str:
        return spiffe_uri(self.role, self.name)

    def __str__(self) -> str:
        return f"{self.role.value}/{self.name}"


def check_name(role: Role, name: str) -> str:
    if role is Role.AGENT:
        return ids.node_id(name, "node")
    if role is Role.TENANT_ADMIN:
        split_tenant_name(name)
        return name
    return ids.person(name, "name")


def tenant_admin_name(tenant: str, person: str) -> str:
    """A tenant-admin's identity name, TENANT/PERSON, each part checked (InvalidField names it)."""
    return f"{ids.person(tenant, 'tenant')}/{ids.person(person, 'person')}"


def split_tenant_name(name: str) -> tuple[str, str]:
    """(tenant, person) of a tenant-admin's name TENANT/PERSON, each checked; InvalidField else."""
    tenant, slash, person = name.partition("/") if isinstance(name, str) else ("", "", "")
    if not slash:
        raise ids.InvalidField("name", f"{str(name)[:80]!r} is not TENANT/PERSON: a tenant-admin's certificate "
                                       "names both its tenant and its person")
    return ids.person(tenant, "tenant"), ids.person(person, "person")


def spiffe_uri(role: Role, name: str) -> str:
    return f"spiffe://{TRUST_DOMAIN}/{role.value}/{check_name(role, name)}"


def parse_uri(uri: str) -> tuple[Role, str]:
    prefix = f"spiffe://{TRUST_DOMAIN}/"
    if not uri.startswith(prefix):
        raise NotAnIdentity(f"{uri[:100]!r} is not a Gleaner identity (spiffe://{TRUST_DOMAIN}/ROLE/NAME)")
    role_text, _, name = uri[len(prefix):].partition("/")
    try:
        role = Role(role_text)
        check_name(role, name)
    except ValueError:
        raise NotAnIdentity(f"{uri[:100]!r} names no valid role and name") from None
    return role, name


def server_name_for(role: Role, name: str = "") -> str:
    """The DNS name a client insists on when it dials this identity's server."""
    if role is Role.AGENT:
        return f"{ids.node_id(name, 'node')}{AGENT_SERVER_SUFFIX}"
    if role is Role.CONTROLLER:
        return CONTROLLER_SERVER_NAME
    raise ValueError(f"{role.value} identities serve nothing")


def pinned_server_name(role: Role, name: str, serial: int) -> str:
    """The DNS name only the certificate with this serial carries (its serial is unique under
    the CA): what a client insists on once it has checked that serial (see rpc.client_channel)."""
    return pin_name(server_name_for(role, name), serial)


def pin_name(server_name: str, serial: int) -> str:
    return f"{serial:x}.serial.{server_name}"


def identity_of_certificate(cert: x509.Certificate) -> Identity:
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        raise NotAnIdentity("the certificate has no subject alternative names") from None
    uris = [u for u in sans.get_values_for_type(x509.UniformResourceIdentifier)
            if u.startswith(f"spiffe://{TRUST_DOMAIN}/")]
    if len(uris) != 1:
        raise NotAnIdentity(f"the certificate names {len(uris)} Gleaner identities; it must name exactly one")
    role, name = parse_uri(uris[0])
    return Identity(role, name, cert.serial_number)


class IdentityCache:
    """Identities of peer certificates, parsed once per certificate (bounded: a flood of
    distinct certificates cannot grow it)."""

    def __init__(self, size: int = 1024) -> None:
        self._size = size
        self._cache: OrderedDict[bytes, Identity | NotAnIdentity] = OrderedDict()
        self._lock = threading.Lock()

    def of_pem(self, pem: bytes) -> Identity:
        with self._lock:
            found = self._cache.get(pem)
            if found is not None:
                self._cache.move_to_end(pem)
        if found is None:
            try:
                found = identity_of_certificate(x509.load_pem_x509_certificate(pem))
            except NotAnIdentity as exc:
                found = exc
            except ValueError as exc:
                found = NotAnIdentity(f"unreadable certificate: {exc}")
            with self._lock:
                self._cache[pem] = found
                while len(self._cache) > self._size:
                    self._cache.popitem(last=False)
        if isinstance(found, NotAnIdentity):
            raise found
        return found

    def of_auth_context(self, auth: dict) -> Identity:
        """The identity in a gRPC auth context (ServicerContext.auth_context())."""
        pems = auth.get("x509_pem_cert") or []
        if not pems:
            raise NotAnIdentity("the caller presented no certificate")
        return self.of_pem(pems[0])
