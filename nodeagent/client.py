"""Client side of the agent's API: channels with mutual TLS, and waiting for a server."""
from __future__ import annotations

import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from .pki import TlsFiles


def client_channel(address: str, tls: TlsFiles | None, server_name: str | None = None) -> grpc.Channel:
    """A channel to a Gleaner server: mutual TLS with `tls`, or plaintext when tls is None."""
    if tls is None:
        return grpc.insecure_channel(address)
    credentials = grpc.ssl_channel_credentials(root_certificates=tls.ca.read_bytes(),
                                               private_key=tls.key.read_bytes(),
                                               certificate_chain=tls.cert.read_bytes())
    options = [("grpc.ssl_target_name_override", server_name)] if server_name else []
    return grpc.secure_channel(address, credentials, options=options)


def is_serving(channel: grpc.Channel, timeout: float = 1.0) -> bool:
    """True when the server's standard health service answers SERVING."""
    try:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=timeout)
    except grpc.RpcError:
        return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


def wait_until_serving(channel: grpc.Channel, timeout: float, alive=lambda: True) -> bool:
    """Poll the health service until SERVING, the timeout, or alive() turning false."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive():
        if is_serving(channel):
            return True
        time.sleep(0.1)
    return False
