"""What every Gleaner server exports to Prometheus beside its own figures: its build, its
certificate's expiry and the calls it denied; and the HTTP endpoint that serves them.

Names follow Prometheus' conventions (base units, counters ending in `_total`), and label sets
are bounded: a gRPC method comes from the service's fixed list, a code from gRPC's.
"""
from __future__ import annotations

import logging
import platform
import threading
from collections.abc import Iterator
from pathlib import Path

from cryptography import x509
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from . import __version__
from .pki import TlsFiles
from .logs import log_event

log = logging.getLogger(__name__)

PROTOCOL = "1"   # the gRPC API's version (protos/): a breaking change raises it


class Denials:
    """Calls refused (PERMISSION_DENIED, or a message that did not parse) since the start, per
    method and code: cumulative, unlike authz.DenialCounter's window for the audit log. A caller
    names the method, so past `max_keys` pairs the rest count under method "(other)"."""

    def __init__(self, max_keys: int = 128) -> None:
        self.max_keys = max_keys
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = {}

    def add(self, method: str, code: str) -> None:
        with self._lock:
            key = (method, code)
            if key not in self._counts and len(self._counts) >= self.max_keys:
                key = ("(other)", code)
            self._counts[key] = self._counts.get(key, 0) + 1

    def counts(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._counts)


DENIALS = Denials()   # one per process: the server's authorizer adds, the metrics read
CALLS = Denials()     # calls answered, by method and status code (rpc.rpc_errors adds; same bounds)


def cert_expiry(path: Path | None) -> float | None:
    """The certificate's notAfter in seconds since the epoch, or None (no TLS, or unreadable)."""
    if path is None:
        return None
    try:
        cert = x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError):
        return None
    return cert.not_valid_after_utc.timestamp()


class ServerBasics(Collector):
    """gleaner_build_info, gleaner_cert_expiry_timestamp_seconds and gleaner_rpc_denials_total."""

    def __init__(self, component: str, tls: TlsFiles | None) -> None:
        self.component = component
        self.tls = tls

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily("gleaner_build_info", "Always 1: the running Gleaner's version, component, "
                                 "gRPC protocol version and Python", labels=["version", "component", "protocol",
                                                                             "python"])
        info.add_metric([__version__, self.component, PROTOCOL, platform.python_version()], 1)
        yield info
        expiry = cert_expiry(self.tls.cert if self.tls else None)
        cert = GaugeMetricFamily("gleaner_cert_expiry_timestamp_seconds",
                                 "When this server's TLS certificate expires, in seconds since the epoch (absent "
                                 "without TLS); renew before it (gleanctl pki)", labels=["component"])
        if expiry is not None:
            cert.add_metric([self.component], expiry)
        yield cert
        denied = CounterMetricFamily("gleaner_rpc_denials", "gRPC calls this server refused since it started: "
                                     "not allowed for the caller's role, revoked, or not a valid message",
                                     labels=["method", "code"])
        for (method, code), count in sorted(DENIALS.counts().items()):
            denied.add_metric([method, code], count)
        yield denied
        calls = CounterMetricFamily("gleaner_rpc_calls", "gRPC calls this server answered since it started, by "
                                    "method and status code (OK, or the error's: INVALID_ARGUMENT, UNAVAILABLE...)",
                                    labels=["method", "code"])
        for (method, code), count in sorted(CALLS.counts().items()):
            calls.add_metric([method, code], count)
        yield calls


def serve_prometheus(listen: str, registry: CollectorRegistry, tls: TlsFiles | None = None) -> WSGIServer:
    """Serve `registry` (only Gleaner's metrics) on http(s)://listen/metrics, HTTPS with the
    server's certificate when `tls` is given. The server's `server_address` has the bound port
    (listen may say port 0); `shutdown()` stops it."""
    host, _, port = listen.rpartition(":")
    server, _thread = start_http_server(int(port), addr=host.strip("[]"), registry=registry,
                                        certfile=str(tls.cert) if tls else None,
                                        keyfile=str(tls.key) if tls else None)
    log_event(log, "metrics.serving", listen=listen, port=server.server_address[1], path="/metrics",
              scheme="https" if tls else "http")
    return server
