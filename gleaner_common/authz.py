"""Authorization for Gleaner's gRPC servers: one interceptor, driven by one table per server.

Every call is checked before the servicer sees it: the caller's certificate must name a Gleaner
identity (see identity.py) that is not revoked, the identity's role must be allowed for the
method, and the caller may hold only so many calls and streams at once. A method that binds a
request field to the caller (an agent's report names its own node) is checked on every message
of the stream. Denials are PERMISSION_DENIED naming the identity and the method; they are logged
(the first of each kind per interval) and counted, in bounded memory, for the audit log (the
controller) or a periodic summary line (the agent).

Revocation reaches open streams too: a stream re-checks its caller on every message it receives
or sends (and whenever the servicer asks is_active()), and a reload of the deny list cancels,
after a short grace, the streams of the identities it revokes that said nothing meanwhile.

The servicer reads the caller from `current_identity()`.

A tenant-admin (Role.TENANT_ADMIN) is allowed a few calls by the table, each with a `tenant`
scope saying how the service keeps it to its own tenant (the interceptor cannot: it takes looking
up the VM or request): a new request's owner is its tenant (request_owner), an existing VM or
request must be its tenant's (check_tenant), a listing shows its tenant's rows only (visible).
Those are pure functions here; the service calls them, and a Denied they raise is refused,
logged and counted by the interceptor exactly as a denial by role.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from .identity import Identity, IdentityCache, NotAnIdentity, Role
from .logs import log_event
from .metrics import DENIALS
from .pki import PkiError, load_deny_list

log = logging.getLogger(__name__)
EVERYONE = frozenset(Role)
READERS = frozenset({Role.CONTROLLER, Role.ADMIN, Role.VIEWER})
HEALTH = "/grpc.health.v1.Health/"
REFLECTION = ("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
              "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo")
# On a unix socket without TLS (the only place --insecure is allowed), the caller is local root.
LOCAL = Identity(Role.ADMIN, "local-root")

_current: contextvars.ContextVar[Identity | None] = contextvars.ContextVar("gleaner_identity", default=None)


def current_identity() -> Identity | None:
    """The identity of the call being served on this thread."""
    return _current.get()


# How a call allowed to a tenant-admin is kept to its own tenant (Rule.tenant; docs/security.md).
OWNER = "owner"      # it makes something new: the owner is the caller's tenant (request_owner)
OBJECT = "object"    # it acts on a tenant's VM, request or settings: that tenant must be the caller's (check_tenant)
FILTER = "filter"    # it lists: only the caller's tenant's rows, and naming another tenant is refused (visible)
TENANT_SCOPES = frozenset({OWNER, OBJECT, FILTER})


@dataclass(frozen=True)
class Rule:
    roles: frozenset[Role]
    node_field: str = ""      # each request message's field must equal an agent caller's node id
    tenant: str = ""          # for a tenant-admin caller: how the service keeps it to its tenant (TENANT_SCOPES)


CONTROLLER_ONLY = frozenset({Role.CONTROLLER})
ADMINS = frozenset({Role.ADMIN})
PEOPLE = frozenset({Role.ADMIN, Role.VIEWER})
# a tenant-admin beside them, kept by the service to its own tenant (Rule.tenant says how)
ADMINS_AND_TENANT = ADMINS | {Role.TENANT_ADMIN}
PEOPLE_AND_TENANT = PEOPLE | {Role.TENANT_ADMIN}
AGENT_API = "/gleaner.agent.v1.NodeAgent/"
CONTROLLER_API = "/gleaner.controller.v1.Controller/"

# Who may call what, for both servers (docs/security.md shows the same table). Anything not here is denied.
TABLE: dict[str, Rule] = {
    # the node agent: only the controller changes domains; people and the controller read
    f"{AGENT_API}LaunchDomain": Rule(CONTROLLER_ONLY),
    f"{AGENT_API}TerminateDomain": Rule(CONTROLLER_ONLY),
    f"{AGENT_API}SetDomainClass": Rule(CONTROLLER_ONLY),
    f"{AGENT_API}HibernateDomain": Rule(CONTROLLER_ONLY),
    f"{AGENT_API}ResumeDomain": Rule(CONTROLLER_ONLY),
    f"{AGENT_API}DescribeHost": Rule(READERS),
    f"{AGENT_API}ListDomains": Rule(READERS),
    f"{AGENT_API}GetMetrics": Rule(READERS),
    f"{AGENT_API}WatchEvents": Rule(READERS),
    # the controller: agents report for their own node only; admins change the pool; people read;
    # a tenant-admin requests, releases and reads its own tenant's VMs and its tenant, nothing else
    f"{CONTROLLER_API}Report": Rule(frozenset({Role.AGENT}), node_field="node_id"),
    f"{CONTROLLER_API}RequestVm": Rule(ADMINS_AND_TENANT, tenant=OWNER),
    f"{CONTROLLER_API}CancelRequest": Rule(ADMINS_AND_TENANT, tenant=OBJECT),
    f"{CONTROLLER_API}Release": Rule(ADMINS_AND_TENANT, tenant=OBJECT),
    f"{CONTROLLER_API}SetBackfill": Rule(ADMINS),
    f"{CONTROLLER_API}SetReserve": Rule(ADMINS),
    f"{CONTROLLER_API}AddHint": Rule(ADMINS),
    f"{CONTROLLER_API}CancelHints": Rule(ADMINS),
    f"{CONTROLLER_API}SetReserveSettings": Rule(ADMINS),
    f"{CONTROLLER_API}CreateTenant": Rule(ADMINS),
    f"{CONTROLLER_API}SetTenant": Rule(ADMINS),
    f"{CONTROLLER_API}SetTenantBackfill": Rule(ADMINS_AND_TENANT, tenant=OBJECT),
    f"{CONTROLLER_API}SetTenantGoal": Rule(ADMINS_AND_TENANT, tenant=OBJECT),
    f"{CONTROLLER_API}DeleteTenant": Rule(ADMINS),
    f"{CONTROLLER_API}ListTenants": Rule(PEOPLE_AND_TENANT, tenant=FILTER),
    f"{CONTROLLER_API}ListNodes": Rule(PEOPLE),
    f"{CONTROLLER_API}ListVms": Rule(PEOPLE_AND_TENANT, tenant=FILTER),
    f"{CONTROLLER_API}GetBackfill": Rule(PEOPLE),
    f"{CONTROLLER_API}ListReserves": Rule(PEOPLE),
    f"{CONTROLLER_API}GetReserveStatus": Rule(PEOPLE),
    f"{CONTROLLER_API}ListEvents": Rule(PEOPLE),
    f"{CONTROLLER_API}FollowEvents": Rule(PEOPLE),
    f"{CONTROLLER_API}Status": Rule(PEOPLE),
    # on both: health for every identity (liveness checks), reflection for people and the controller
    f"{HEALTH}Check": Rule(EVERYONE),
    f"{HEALTH}Watch": Rule(EVERYONE),
    **{method: Rule(READERS) for method in REFLECTION},
}


@dataclass
class Limits:
    """How much one identity, and everyone together, may hold at once."""
    calls_per_identity: int = 16
    streams_per_identity: int = 4
    streams_total: int = 32


class Denied(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def same_tenant(identity: Identity, tenant: str) -> bool:
    """Whether `identity` is a tenant-admin of `tenant` (exactly: no other role, no other tenant)."""
    return identity.role is Role.TENANT_ADMIN and identity.tenant == tenant


def tenant_scoped(identity: Identity) -> bool:
    """Whether the calls `identity` may make are kept to one tenant (a tenant-admin's)."""
    return identity.role is Role.TENANT_ADMIN


def visible(identity: Identity, tenant: str) -> bool:
    """Whether a row of `tenant` (a VM, a request, the tenant itself) may be shown to `identity`:
    every row to the roles the table lets read, only its own tenant's to a tenant-admin."""
    return not tenant_scoped(identity) or same_tenant(identity, tenant)


def check_tenant(identity: Identity, tenant: str, what: str) -> None:
    """Denied (PERMISSION_DENIED) unless `identity` may act on `what`, which is `tenant`'s: any
    tenant's for the roles the table allowed the call, its own only for a tenant-admin. The
    message names the caller (person and tenant) and the tenant `what` belongs to."""
    if not visible(identity, tenant):
        raise Denied(grpc.StatusCode.PERMISSION_DENIED,
                     f"{identity} acts for tenant {identity.tenant!r} only: {what} is tenant {tenant!r}'s")


def request_owner(identity: Identity, owner: str) -> str:
    """The owner a new on-demand request is made under: as asked, but a tenant-admin's is its
    tenant (an empty owner is taken as it); one naming another owner is Denied, naming both."""
    if not tenant_scoped(identity):
        return owner
    if owner not in ("", identity.tenant):
        raise Denied(grpc.StatusCode.PERMISSION_DENIED,
                     f"{identity} requests for tenant {identity.tenant!r} only, not for owner {owner[:64]!r}: "
                     f"give owner {identity.tenant!r} (or none)")
    return identity.tenant


class DenyList:
    """Revoked certificate serials, reloaded on demand (the servers do it on SIGHUP)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.serials: frozenset[int] = load_deny_list(path)

    def reload(self) -> bool:
        """Re-read the file. A bad one is logged and the list in force kept: a typo must neither
        stop the server nor let revoked certificates back in. So does a file that vanished (moved
        away mid-rewrite, say): a missing file means an empty list only at start."""
        if self.path is not None and not self.path.exists() and self.serials:
            log_event(log, "tls.deny_list_rejected", logging.ERROR, file=str(self.path), line=0,
                      error="the file is gone", revoked=len(self.serials),
                      note="the list in force is kept; put the file back and send SIGHUP again")
            return False
        try:
            serials = load_deny_list(self.path)
        except PkiError as exc:
            log_event(log, "tls.deny_list_rejected", logging.ERROR, file=str(self.path),
                      line=getattr(exc, "line", 0), error=str(exc), revoked=len(self.serials),
                      note="the list in force is kept; fix the file and send SIGHUP again")
            return False
        self.serials = serials
        log_event(log, "tls.deny_list_loaded", file=str(self.path), revoked=len(self.serials))
        return True

    def __contains__(self, serial: int) -> bool:
        return serial in self.serials


@dataclass
class DenialCounter:
    """Denials per (identity, method) since the last flush, in bounded memory: past `max_keys`
    distinct pairs, further ones are counted under one catch-all key."""
    max_keys: int = 256
    counts: dict[tuple[str, str, str], int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, who: str, method: str, why: str) -> bool:
        """Count one denial; True for the first of its kind since the last flush (worth a log line)."""
        key = (who, method, why)
        with self.lock:
            if key not in self.counts and len(self.counts) >= self.max_keys:
                key = ("(other identities)", "(other methods)", "(other reasons)")
            first = key not in self.counts
            self.counts[key] = self.counts.get(key, 0) + 1
            return first

    def flush(self) -> list[tuple[str, str, str, int]]:
        with self.lock:
            taken, self.counts = self.counts, {}
        return [(who, method, why, n) for (who, method, why), n in sorted(taken.items())]


class _Holds:
    """Calls and streams in flight per identity and in total."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.lock = threading.Lock()
        self.calls: dict[str, int] = {}
        self.streams: dict[str, int] = {}
        self.streams_total = 0

    def take(self, who: str, stream: bool) -> None:
        with self.lock:
            if stream:
                if self.streams.get(who, 0) >= self.limits.streams_per_identity:
                    raise Denied(grpc.StatusCode.RESOURCE_EXHAUSTED, f"{who} already holds "
                                 f"{self.limits.streams_per_identity} streams, the most one identity may")
                if self.streams_total >= self.limits.streams_total:
                    raise Denied(grpc.StatusCode.RESOURCE_EXHAUSTED, f"the server holds {self.streams_total} "
                                 "streams, the most it serves at once; try again later")
                self.streams[who] = self.streams.get(who, 0) + 1
                self.streams_total += 1
            else:
                if self.calls.get(who, 0) >= self.limits.calls_per_identity:
                    raise Denied(grpc.StatusCode.RESOURCE_EXHAUSTED, f"{who} already has "
                                 f"{self.limits.calls_per_identity} calls in progress, the most one identity may")
                self.calls[who] = self.calls.get(who, 0) + 1

    def give_back(self, who: str, stream: bool) -> None:
        with self.lock:
            table = self.streams if stream else self.calls
            table[who] -= 1
            if not table[who]:
                del table[who]
            if stream:
                self.streams_total -= 1


class _OpenStreams:
    """The streams being served, so that a reload of the deny list can end its identities' ones."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: dict[int, tuple[Identity, str, grpc.ServicerContext]] = {}

    def add(self, identity: Identity, method: str, context: grpc.ServicerContext) -> int:
        with self.lock:
            self.calls[id(context)] = (identity, method, context)
        return id(context)

    def remove(self, token: int) -> None:
        with self.lock:
            self.calls.pop(token, None)

    def of_serials(self, serials: frozenset[int]) -> list[tuple[Identity, str, grpc.ServicerContext]]:
        with self.lock:
            return [call for call in self.calls.values() if call[0].serial in serials]


class _RecheckingContext:
    """A response stream's context: is_active() first re-checks the caller, so a servicer that
    polls it (WatchEvents does, twice a second) ends a revoked caller's stream even when quiet."""

    def __init__(self, context: grpc.ServicerContext, recheck: Callable[[], None]) -> None:
        self._context, self._recheck = context, recheck

    def is_active(self) -> bool:
        self._recheck()
        return self._context.is_active()

    def __getattr__(self, name: str):
        return getattr(self._context, name)


# A revoked identity's stream that neither sends nor receives (nor polls) is cancelled this long
# after the reload; the others end sooner, with PERMISSION_DENIED, at their next message.
REVOKED_STREAM_GRACE = 5.0


@dataclass(frozen=True)
class Unparsable:
    """A request whose bytes are not the method's message: gRPC would answer INTERNAL for it
    (an exception in its deserializer); the call is refused INVALID_ARGUMENT once authorized."""
    error: str


def tolerant(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserializer is None:
        return None

    def parse(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception as exc:   # DecodeError, or whatever a message's parser raises on junk
            return Unparsable(f"{type(exc).__name__}: {exc}")
    return parse


class Authorizer(grpc.ServerInterceptor):
    """The interceptor: `rules` (TABLE unless given) maps full method names to the roles allowed;
    anything not in it is denied. With `insecure` (a unix socket, no TLS) every caller is LOCAL."""

    def __init__(self, rules: dict[str, Rule] | None = None, deny_list: DenyList | None = None,
                 limits: Limits | None = None, insecure: bool = False) -> None:
        self.rules = TABLE if rules is None else rules
        self.deny_list = deny_list or DenyList(None)
        self.limits = limits or Limits()
        self.insecure = insecure
        self.denials = DenialCounter()
        self.revoked_stream_grace = REVOKED_STREAM_GRACE
        self._reloading = threading.Lock()
        self._holds = _Holds(self.limits)
        self._identities = IdentityCache()
        self._streams = _OpenStreams()

    # -- revocation and denials over time --------------------------------------------------------

    def reload_deny_list(self) -> bool:
        """Re-read the deny list (servers do it on SIGHUP; never raises: a bad file keeps the list
        in force), and end the open streams of every identity it revokes."""
        with self._reloading:   # two quick SIGHUPs must not finish out of order
            if not self.deny_list.reload():
                return False
            revoked = self._streams.of_serials(self.deny_list.serials)
        for identity, method, context in revoked:
            log_event(log, "rpc.stream_revoked", logging.WARNING, identity=str(identity), method=method,
                      peer=context.peer(), grace_s=self.revoked_stream_grace)
        if revoked:   # one timer a reload, not one a stream; cancelling an ended call does nothing
            timer = threading.Timer(self.revoked_stream_grace, lambda: [c.cancel() for _i, _m, c in revoked])
            timer.daemon = True
            timer.start()
        return True

    def log_denials(self, window_s: float) -> int:
        """One summary line per (identity, call, reason) denied since the last flush, with its
        count: repeats show without a line each, and at most max_keys + 1 lines a flush."""
        rows = self.denials.flush()
        for who, method, why, count in rows:
            log_event(log, "rpc.denied_summary", logging.WARNING, identity=who, method=method, reason=why,
                      count=count, window_s=window_s)
        return len(rows)

    # -- checks ---------------------------------------------------------------------------------

    def identify(self, context: grpc.ServicerContext, method: str) -> Identity:
        if self.insecure:
            return LOCAL
        try:
            identity = self._identities.of_auth_context(context.auth_context())
        except NotAnIdentity as exc:
            raise Denied(grpc.StatusCode.PERMISSION_DENIED, f"the caller's certificate is not a Gleaner "
                                                           f"identity ({exc}); it may not call {method}") from None
        self.check_not_revoked(identity, method)
        return identity

    def check_not_revoked(self, identity: Identity, method: str) -> None:
        if identity.serial in self.deny_list:
            raise Denied(grpc.StatusCode.PERMISSION_DENIED, f"{identity} presents a revoked certificate (serial "
                                                           f"{identity.serial:x}); it may not call {method}")

    def authorize(self, identity: Identity, method: str) -> Rule:
        rule = self.rules.get(method)
        if rule is None or (identity is not LOCAL and identity.role not in rule.roles):
            allowed = ", ".join(sorted(r.value for r in rule.roles)) if rule else "no identity"
            raise Denied(grpc.StatusCode.PERMISSION_DENIED,
                         f"{identity} may not call {method} (allowed: {allowed})")
        return rule

    def check_message(self, identity: Identity, method: str, rule: Rule, message) -> None:
        self.check_not_revoked(identity, method)
        if rule.node_field and identity is not LOCAL:
            claimed = getattr(message, rule.node_field)
            if claimed != identity.name:
                raise Denied(grpc.StatusCode.PERMISSION_DENIED,
                             f"{identity} may speak only for node {identity.name!r}, not "
                             f"{str(claimed)[:64]!r} ({method} {rule.node_field})")

    def refuse(self, context: grpc.ServicerContext, method: str, exc: Denied, who: str) -> None:
        DENIALS.add(method, exc.code.name)
        if exc.code == grpc.StatusCode.PERMISSION_DENIED and self.denials.add(who, method, str(exc)):
            log_event(log, "rpc.denied", logging.WARNING, identity=who, method=method, peer=context.peer(),
                      error=str(exc), note="further denials like it are counted, not logged, until the next flush")
        context.abort(exc.code, str(exc))

    def refuse_unparsable(self, message: Any, method: str, context: grpc.ServicerContext, who: str) -> None:
        """Abort the call (INVALID_ARGUMENT) if `message` did not parse; counted with the denials,
        so a caller sending junk in a loop costs one log line per flush, not one per message."""
        if not isinstance(message, Unparsable):
            return
        DENIALS.add(method, grpc.StatusCode.INVALID_ARGUMENT.name)
        if self.denials.add(who, method, "not a valid message"):
            log_event(log, "rpc.unparsable", logging.WARNING, identity=who, method=method, peer=context.peer(),
                      error=message.error[:200], note="further ones like it are counted, not logged, until the "
                                                      "next flush")
        context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                      f"the request is not a valid message for {method} ({message.error[:200]})")

    def recheck(self, identity: Identity, method: str, context: grpc.ServicerContext) -> None:
        """Within a stream: end it (PERMISSION_DENIED) if its caller was revoked since it began."""
        try:
            self.check_not_revoked(identity, method)
        except Denied as exc:
            self.refuse(context, method, exc, str(identity))

    # -- the interceptor ------------------------------------------------------------------------

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        stream = handler.request_streaming or handler.response_streaming
        kind = ("stream" if handler.request_streaming else "unary") + "_" + \
               ("stream" if handler.response_streaming else "unary")
        original = getattr(handler, kind)

        def admit(request, context):
            """(identity, the request with its messages checked); aborts the call if denied."""
            who = "(unidentified)"
            try:
                identity = self.identify(context, method)
                who = str(identity)
                rule = self.authorize(identity, method)
                if not handler.request_streaming:
                    self.refuse_unparsable(request, method, context, who)
                    self.check_message(identity, method, rule, request)
                self._holds.take(who, stream)
            except Denied as exc:
                self.refuse(context, method, exc, who)
            if handler.request_streaming:
                request = self._checked(identity, rule, method, request, context)
            return identity, request

        if handler.response_streaming:
            def behavior(request, context):
                identity, request = admit(request, context)
                recheck = functools.partial(self.recheck, identity, method, context)
                with self._serving(identity, method, context, stream):
                    try:
                        for message in original(request, _RecheckingContext(context, recheck)):
                            recheck()
                            yield message
                    except Denied as exc:   # the service's own check, as in a unary call
                        self.refuse(context, method, Denied(exc.code, f"{exc} ({method})"), str(identity))
        else:
            def behavior(request, context):
                identity, request = admit(request, context)
                with self._serving(identity, method, context, stream):
                    try:
                        return original(request, context)
                    except Denied as exc:   # the service's own check (check_tenant, request_owner)
                        self.refuse(context, method, Denied(exc.code, f"{exc} ({method})"), str(identity))
        factory = getattr(grpc, f"{kind}_rpc_method_handler")
        return factory(behavior, request_deserializer=tolerant(handler.request_deserializer),
                       response_serializer=handler.response_serializer)

    @contextlib.contextmanager
    def _serving(self, identity: Identity, method: str, context, stream: bool) -> Iterator[None]:
        """The call's identity for the servicer, and its place (a stream's entry for revocation)
        held while it runs."""
        token = _current.set(identity)
        opened = self._streams.add(identity, method, context) if stream else None
        try:
            yield
        finally:
            if opened is not None:
                self._streams.remove(opened)
            _current.reset(token)
            self._holds.give_back(str(identity), stream)

    def _checked(self, identity: Identity, rule: Rule, method: str, messages: Iterable, context) -> Iterator:
        """The request stream, each message checked as it arrives (revocation, node binding)."""
        for message in messages:
            self.refuse_unparsable(message, method, context, str(identity))
            try:
                self.check_message(identity, method, rule, message)
            except Denied as exc:
                self.refuse(context, method, exc, str(identity))
            yield message
