"""gRPC set-up shared by every Gleaner process: servers with mutual TLS, the authorization
interceptor, health, reflection and limits; client channels that check whom they reach; and
the mapping of exceptions to status codes.

Limits a server keeps whatever its callers do:
- one worker thread per call, `workers` in all; at most `max_concurrent` calls admitted (more
  get RESOURCE_EXHAUSTED at once, from gRPC itself), and per identity what authz.Limits says;
- messages up to MAX_RECEIVE bytes;
- keepalive: the server pings idle connections and drops a peer that stops answering, so a dead
  client's streams and threads are freed; a client pinging too often is disconnected;
- no SO_REUSEPORT: a second server on the same port fails to start instead of sharing it.
"""
from __future__ import annotations

import functools
import logging
import math
import os
import signal
import socket
import ssl
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from .authz import Authorizer, DenyList, Limits, Rule
from cryptography import x509

from .identity import Role, pin_name, server_name_for
from .logs import log_event
from .metrics import CALLS
from .pki import PkiError, TlsFiles

log = logging.getLogger(__name__)
MAX_RECEIVE = 4 * 2**20
MAX_SEND = 64 * 2**20
SERVER_OPTIONS = [
    ("grpc.so_reuseport", 0),
    ("grpc.max_receive_message_length", MAX_RECEIVE),
    ("grpc.max_send_message_length", MAX_SEND),
    ("grpc.keepalive_time_ms", 20_000),                       # ping a quiet peer every 20 s ...
    ("grpc.keepalive_timeout_ms", 10_000),                    # ... and drop it if it does not answer in 10 s
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),  # a client may ping us at most every 5 s ...
    ("grpc.http2.max_ping_strikes", 2),                       # ... or be disconnected
    ("grpc.max_connection_idle_ms", 600_000),                 # an unused connection is closed after 10 min
]
CLIENT_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_SEND),
    ("grpc.max_send_message_length", MAX_RECEIVE),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
]
# The caller's mistake, not the host's trouble: logged as warnings.
CLIENT_ERRORS = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.ALREADY_EXISTS,
                 grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.PERMISSION_DENIED,
                 grpc.StatusCode.RESOURCE_EXHAUSTED}


def rpc_errors(error_codes: list[tuple[type[BaseException], grpc.StatusCode]]) -> Callable:
    """A decorator turning these exceptions into gRPC status codes with a message an admin can act on."""
    def decorate(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
            try:
                answer = method(self, request, context)
                CALLS.add(method.__name__, "OK")
                return answer
            except tuple(cls for cls, _ in error_codes) as exc:
                code = next(code for cls, code in error_codes if isinstance(exc, cls))
                CALLS.add(method.__name__, code.name)
                level = logging.WARNING if code in CLIENT_ERRORS else logging.ERROR
                log_event(log, "rpc.failed", level, method=method.__name__, code=code.name, error=str(exc),
                          peer=context.peer())
                context.abort(code, str(exc))
        return wrapper
    return decorate


@dataclass(frozen=True)
class ServerSettings:
    listen: str
    tls: TlsFiles | None              # None: no TLS, only on a unix socket
    deny_list: DenyList
    limits: Limits
    workers: int = 32
    max_concurrent: int = 64


@dataclass
class RunningServer:
    server: grpc.Server
    port: int
    authorizer: Authorizer

    def stop(self, grace: float = 5.0) -> None:
        self.server.stop(grace=grace).wait()


def reload_on_sighup(server: RunningServer) -> None:
    """SIGHUP re-reads the deny list, on a thread of its own: the handler only starts it, so a
    slow or bad reload can neither block the main thread nor kill the process."""
    def reload(_signum, _frame) -> None:
        threading.Thread(target=server.authorizer.reload_deny_list, name="sighup", daemon=True).start()
    # (reload_deny_list takes a lock: two quick SIGHUPs cannot finish out of order)
    signal.signal(signal.SIGHUP, reload)


def server_credentials(tls: TlsFiles) -> grpc.ServerCredentials:
    """Mutual TLS: our certificate for clients, and only clients signed by our CA get in."""
    return grpc.ssl_server_credentials([(tls.key.read_bytes(), tls.cert.read_bytes())],
                                       root_certificates=tls.ca.read_bytes(), require_client_auth=True)


def start_server(settings: ServerSettings, service_name: str, add_servicer: Callable[[grpc.Server], None],
                 rules: dict[str, Rule] | None = None) -> RunningServer:
    """A started gRPC server for one Gleaner service plus health and reflection, every call
    authorized by `rules` (authz.TABLE unless given)."""
    authorizer = Authorizer(rules, settings.deny_list, settings.limits, insecure=settings.tls is None)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=settings.workers, thread_name_prefix="rpc"),
                         interceptors=[authorizer], options=SERVER_OPTIONS,
                         maximum_concurrent_rpcs=settings.max_concurrent)
    add_servicer(server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection([service_name, health.SERVICE_NAME, reflection.SERVICE_NAME], server)
    try:
        if settings.tls is None:
            port = server.add_insecure_port(settings.listen)
        else:
            port = server.add_secure_port(settings.listen, server_credentials(settings.tls))
    except RuntimeError:  # gRPC's way of saying the bind failed
        port = 0
    if port == 0 and not settings.listen.startswith("unix:"):
        raise OSError(f"cannot listen on {settings.listen}: another process holds it (is a second controller or "
                      "agent running?), or it is not an address of this host")
    server.start()
    for name in ("", service_name):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return RunningServer(server, port, authorizer)


def client_channel(address: str, tls: TlsFiles | None, server_name: str | None = None) -> grpc.Channel:
    """A channel to a Gleaner server: mutual TLS with `tls` (plaintext when None, for a unix
    socket). With `server_name`, the server's certificate must carry that DNS name, which is
    how a client checks whom it reached (see identity.server_name_for). With a deny list in
    `tls`, a server whose certificate it revokes is refused too (RevocationCheckedChannel)."""
    if tls is None:
        return grpc.insecure_channel(address, options=CLIENT_OPTIONS)
    if tls.deny_list is not None:
        return RevocationCheckedChannel(address, tls, server_name)
    return _tls_channel(address, tls, server_name)


def _tls_channel(address: str, tls: TlsFiles, server_name: str | None) -> grpc.Channel:
    credentials = grpc.ssl_channel_credentials(root_certificates=tls.ca.read_bytes(),
                                               private_key=tls.key.read_bytes(),
                                               certificate_chain=tls.cert.read_bytes())
    options = list(CLIENT_OPTIONS)
    if server_name:
        options.append(("grpc.ssl_target_name_override", server_name))
    return grpc.secure_channel(address, credentials, options=options)


def channel_to(role: Role, name: str, address: str, tls: TlsFiles | None) -> grpc.Channel:
    """A channel that reaches only the server of this identity (an agent's node, the controller)."""
    return client_channel(address, tls, server_name_for(role, name) if tls is not None else None)


def is_serving(channel: grpc.Channel, timeout: float = 1.0) -> bool:
    """True when the server's standard health service answers SERVING."""
    try:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=timeout)
    except grpc.RpcError:
        return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


def wait_until_serving(channel: grpc.Channel, timeout: float, alive: Callable[[], bool] = lambda: True) -> bool:
    """Poll the health service until SERVING, the timeout, or alive() turning false."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive():
        if is_serving(channel):
            return True
        time.sleep(0.1)
    return False


# -- clients check the servers they dial against their deny list ----------------------------------
#
# gRPC's Python API does not show a client the server's certificate (no verify callback, no CRL
# for SSL credentials, no auth context on client calls: grpc/grpc#32635). So the client looks for
# itself: a TLS handshake of its own to the same address (same CA, same client certificate, same
# server name), whose certificate serial it checks against its deny list. Then it pins: serving
# certificates carry SERIAL.serial.<server name> (pki._alt_names), and the gRPC channel insists on
# that name, so the connection gRPC makes reaches that very certificate and no other (a relay
# answering the look with the real server and the call with a revoked key fails its handshake).
# Certificates issued before they carried that name are checked, not pinned.

PROBE_TTL = 30.0        # how long a look at an address holds before the next call looks again
PROBE_TIMEOUT = 5.0


class ServerRefused(grpc.RpcError):
    """The client refused the server before the call (UNAVAILABLE, as a failed handshake is):
    its certificate is revoked, or it could not be looked at. details() says which."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self._message = message

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return self._message


class WatchedDenyList:
    """A client's deny list: read when made (a bad file is an error, as for servers), and again
    whenever the file changes; a bad or vanished file on a re-read keeps the list in force."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._list = DenyList(path)
        self._stamp = self._stat()
        self._lock = threading.Lock()

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            info = os.stat(self.path)
        except OSError:
            return None
        return info.st_mtime_ns, info.st_size, info.st_ino

    def serials(self) -> frozenset[int]:
        stamp = self._stat()
        if stamp != self._stamp:
            with self._lock:
                if stamp != self._stamp:
                    self._stamp = stamp
                    self._list.reload()
        return self._list.serials


_deny_lists: dict[Path, WatchedDenyList] = {}
_deny_lists_lock = threading.Lock()


def watched_deny_list(path: Path) -> WatchedDenyList:
    """One watcher per file in a process (the controller dials many agents with one list)."""
    with _deny_lists_lock:
        found = _deny_lists.get(path)
        if found is None:
            found = _deny_lists[path] = WatchedDenyList(path)
        return found


def _socket_address(address: str) -> tuple[int, Any]:
    """(family, address) for socket.connect from a gRPC target: HOST:PORT, [V6]:PORT, with or
    without dns:/ipv4:/ipv6:, or unix:PATH."""
    if address.startswith("unix:"):
        return socket.AF_UNIX, address[len("unix:"):].removeprefix("//")
    for scheme in ("dns:", "ipv4:", "ipv6:"):
        if address.startswith(scheme):
            address = address[len(scheme):]
            if address.startswith("//"):   # dns://AUTHORITY/HOST:PORT
                address = address[2:].partition("/")[2]
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ServerRefused(f"cannot look at the server at {address[:100]!r} to check it against the deny list: "
                            "not HOST:PORT")
    return socket.AF_UNSPEC, (host.strip("[]"), int(port))


def server_certificate(address: str, tls: TlsFiles, server_name: str | None, timeout: float) -> x509.Certificate:
    """The certificate the server at `address` presents, verified as gRPC would verify it (our
    CA, `server_name` or the address's host), from a TLS handshake of our own."""
    family, where = _socket_address(address)
    context = ssl.create_default_context(cafile=str(tls.ca))
    context.load_cert_chain(str(tls.cert), str(tls.key))
    context.set_alpn_protocols(["h2"])
    hostname = server_name or (where[0] if isinstance(where, tuple) else None)
    if hostname is None:
        context.check_hostname = False   # a unix socket without a server name: the CA still decides
    try:
        if family == socket.AF_UNIX:
            raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            raw.settimeout(timeout)
            raw.connect(where)
        else:
            raw = socket.create_connection(where, timeout=timeout)
        with raw, context.wrap_socket(raw, server_hostname=hostname) as conn:
            der = conn.getpeercert(binary_form=True)
    except (OSError, ValueError) as exc:   # ssl.SSLError is an OSError
        raise ServerRefused(f"cannot look at the server at {address} to check its certificate against the deny "
                            f"list: {exc}") from None
    return x509.load_der_x509_certificate(der)


class RevocationCheckedChannel(grpc.Channel):
    """A channel whose every call first checks the server's certificate serial against the deny
    list (looked at again every PROBE_TTL seconds, and at once when the list revokes the serial
    last seen), refusing a revoked server with ServerRefused naming the serial. The gRPC channel
    underneath insists on the certificate looked at (its pinned name), and is made anew when the
    server's certificate changes. A request stream is checked at every message it sends."""

    def __init__(self, address: str, tls: TlsFiles, server_name: str | None) -> None:
        assert tls.deny_list is not None
        self.address, self.tls, self.server_name = address, tls, server_name
        self._deny_list: WatchedDenyList | None = None
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None
        self._pinned: str | None = None
        self._serial: int | None = None
        self._looked_at = -math.inf
        self._retired: list[grpc.Channel] = []
        self._refused: int | None = None

    # -- the check -----------------------------------------------------------------------------

    @property
    def deny_list(self) -> WatchedDenyList:
        """Loaded at the first call, not when the channel is made: a file gone bad since the
        process started refuses the call (naming the file and line), never the caller's code."""
        if self._deny_list is None:
            assert self.tls.deny_list is not None
            try:
                self._deny_list = watched_deny_list(self.tls.deny_list)
            except PkiError as exc:
                raise ServerRefused(f"cannot check the server at {self.address} against the deny list: {exc}") \
                    from None
        return self._deny_list

    def checked(self, timeout: float | None = None) -> grpc.Channel:
        """The gRPC channel to use now, once the server is known not to be revoked."""
        with self._lock:
            revoked = self.deny_list.serials()   # first: a list that cannot be read refuses without a look
            stale = time.monotonic() - self._looked_at > PROBE_TTL
            if self._serial is None or stale or self._serial in revoked:
                self._look(PROBE_TIMEOUT if timeout is None else max(0.1, min(PROBE_TIMEOUT, timeout)))
            self.refuse_if_revoked()
            assert self._channel is not None
            return self._channel

    def refuse_if_revoked(self) -> None:
        serial = self._serial
        if serial is not None and serial in self.deny_list.serials():
            if self._refused != serial:   # one log line per certificate, not one per call
                self._refused = serial
                log_event(log, "tls.server_revoked", logging.WARNING, address=self.address,
                          server=self.server_name or "", serial=f"{serial:x}", deny_list=str(self.deny_list.path))
            raise ServerRefused(f"the server at {self.address} presents a revoked certificate (serial {serial:x}, "
                                f"in the deny list {self.deny_list.path}); refusing to talk to it")

    def _look(self, timeout: float) -> None:
        cert = server_certificate(self.address, self.tls, self.server_name, timeout)
        self._serial, self._looked_at = cert.serial_number, time.monotonic()
        pinned = self.server_name
        if self.server_name:
            candidate = pin_name(self.server_name, cert.serial_number)
            names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            if candidate in names.get_values_for_type(x509.DNSName):
                pinned = candidate
        if self._channel is None or pinned != self._pinned:
            if self._channel is not None:
                self._retired.append(self._channel)   # calls on it may still run; closed with us
            self._channel, self._pinned = _tls_channel(self.address, self.tls, pinned), pinned

    # -- grpc.Channel ----------------------------------------------------------------------------

    def unary_unary(self, method, request_serializer=None, response_deserializer=None, **kwargs):
        return _CheckedCall(self, "unary_unary", method, request_serializer, response_deserializer, kwargs)

    def unary_stream(self, method, request_serializer=None, response_deserializer=None, **kwargs):
        return _CheckedCall(self, "unary_stream", method, request_serializer, response_deserializer, kwargs)

    def stream_unary(self, method, request_serializer=None, response_deserializer=None, **kwargs):
        return _CheckedCall(self, "stream_unary", method, request_serializer, response_deserializer, kwargs)

    def stream_stream(self, method, request_serializer=None, response_deserializer=None, **kwargs):
        return _CheckedCall(self, "stream_stream", method, request_serializer, response_deserializer, kwargs)

    def subscribe(self, callback, try_to_connect=False):
        self.checked().subscribe(callback, try_to_connect)

    def unsubscribe(self, callback):
        if self._channel is not None:
            self._channel.unsubscribe(callback)

    def close(self) -> None:
        with self._lock:
            for channel in [self._channel, *self._retired]:
                if channel is not None:
                    channel.close()
            self._channel, self._retired = None, []

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        self.close()
        return False


class _CheckedCall:
    """A multi-callable that checks the server before each call, then calls through the current
    gRPC channel (its multi-callable made once per channel)."""

    def __init__(self, owner: RevocationCheckedChannel, kind: str, method: str, serializer, deserializer,
                 kwargs: dict) -> None:
        self._owner, self._kind, self._method = owner, kind, method
        self._args = (serializer, deserializer)
        self._kwargs = kwargs
        self._made: tuple[grpc.Channel, Any] | None = None

    def _target(self, timeout: float | None):
        channel = self._owner.checked(timeout)
        made = self._made
        if made is None or made[0] is not channel:
            made = self._made = (channel, getattr(channel, self._kind)(self._method, *self._args, **self._kwargs))
        return made[1]

    def _watched(self, requests, refused: list[ServerRefused], finished: threading.Event):
        """The request stream, ended before any message once the server's serial is revoked."""
        for message in requests:
            try:
                self._owner.refuse_if_revoked()
            except ServerRefused as exc:
                refused.append(exc)
                finished.set()
                return
            yield message

    def __call__(self, request, timeout=None, metadata=None, credentials=None, wait_for_ready=None,
                 compression=None):
        target = self._target(timeout)
        options = dict(timeout=timeout, metadata=metadata, credentials=credentials, wait_for_ready=wait_for_ready,
                       compression=compression)
        if self._kind == "unary_unary" or self._kind == "unary_stream":
            return target(request, **options)
        refused: list[ServerRefused] = []
        finished = threading.Event()
        if self._kind == "stream_stream":
            return target(self._watched(request, refused, finished), **options)
        # stream_unary (the agent's report stream): as a future, so that a revocation while it
        # runs can end it at once rather than when the server answers
        call = target.future(self._watched(request, refused, finished), **options)
        call.add_done_callback(lambda _call: finished.set())
        finished.wait()
        if refused:
            call.cancel()
            raise refused[0]
        return call.result()

    def with_call(self, request, timeout=None, **kwargs):
        return self._target(timeout).with_call(request, timeout=timeout, **kwargs)

    def future(self, request, timeout=None, **kwargs):
        return self._target(timeout).future(request, timeout=timeout, **kwargs)
