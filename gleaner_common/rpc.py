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
import signal
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from .authz import Authorizer, DenyList, Limits, Rule
from .identity import Role, server_name_for
from .logs import log_event
from .pki import TlsFiles

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
                return method(self, request, context)
            except tuple(cls for cls, _ in error_codes) as exc:
                code = next(code for cls, code in error_codes if isinstance(exc, cls))
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
    how a client checks whom it reached (see identity.server_name_for)."""
    if tls is None:
        return grpc.insecure_channel(address, options=CLIENT_OPTIONS)
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
