"""The authorization interceptor on a real gRPC server with mutual TLS (health and reflection
services, which every Gleaner server carries), with certificates from the project's PKI."""
from __future__ import annotations

import threading

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gleaner_common import pki
from gleaner_common.authz import DenyList, Limits, Rule
from gleaner_common.identity import Role
from gleaner_common.rpc import ServerSettings, channel_to, client_channel, start_server

CHECK = "/grpc.health.v1.Health/Check"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    return pki.ensure_lab_pki(tmp_path_factory.mktemp("pki"), ("node1", "node2"))


def serve(lab, rules=None, limits=None):
    deny = DenyList(lab.deny_list)
    settings = ServerSettings("127.0.0.1:0", lab.agent("node1"), deny, limits or Limits(), workers=8)
    running = start_server(settings, "gleaner.test", lambda server: None, rules)
    return running, f"127.0.0.1:{running.port}"


def check(address, tls, server_name=None):
    with client_channel(address, tls, server_name) as channel:
        return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)


def code_of(call):
    try:
        call()
    except grpc.RpcError as exc:
        return exc.code(), exc.details()
    return grpc.StatusCode.OK, ""


def test_every_identity_may_check_health_and_the_table_decides_the_rest(lab):
    running, address = serve(lab, {CHECK: Rule(frozenset({Role.CONTROLLER}))})
    try:
        assert code_of(lambda: check(address, lab.controller))[0] == grpc.StatusCode.OK
        code, details = code_of(lambda: check(address, lab.viewer))
        assert code == grpc.StatusCode.PERMISSION_DENIED
        assert "viewer/lab-viewer may not call /grpc.health.v1.Health/Check" in details
        assert running.authorizer.denials.flush()[0][3] == 1
    finally:
        running.stop(0)


def test_a_revoked_certificate_is_refused_after_reload(lab, tmp_path):
    viewer = pki.issue(lab.directory, Role.VIEWER, "carol")
    running, address = serve(lab)
    try:
        assert code_of(lambda: check(address, viewer))[0] == grpc.StatusCode.OK
        pki.revoke(lab.directory, str(viewer.cert), "left the team")
        assert code_of(lambda: check(address, viewer))[0] == grpc.StatusCode.OK  # not reloaded yet
        running.authorizer.deny_list.reload()
        code, details = code_of(lambda: check(address, viewer))
        assert code == grpc.StatusCode.PERMISSION_DENIED and "revoked" in details
        assert code_of(lambda: check(address, lab.admin))[0] == grpc.StatusCode.OK
    finally:
        running.stop(0)


def test_a_client_reaches_only_the_node_it_names(lab):
    running, address = serve(lab)  # serves with node1's certificate
    try:
        with channel_to(Role.AGENT, "node1", address, lab.controller) as channel:
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        with channel_to(Role.AGENT, "node2", address, lab.controller) as channel:
            code, _ = code_of(lambda: health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(),
                                                                               timeout=5))
        assert code == grpc.StatusCode.UNAVAILABLE
    finally:
        running.stop(0)


def test_streams_per_identity_are_bounded(lab):
    running, address = serve(lab, limits=Limits(streams_per_identity=2, streams_total=10))
    channel = client_channel(address, lab.viewer)
    try:
        stub = health_pb2_grpc.HealthStub(channel)
        held = [stub.Watch(health_pb2.HealthCheckRequest()) for _ in range(2)]
        for stream in held:
            next(stream)  # the server holds both now
        third = stub.Watch(health_pb2.HealthCheckRequest())
        code, details = code_of(lambda: next(third))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "2 streams" in details
        assert code_of(lambda: check(address, lab.admin))[0] == grpc.StatusCode.OK  # others still served
        held[0].cancel()
        threading.Event().wait(0.3)
        fourth = stub.Watch(health_pb2.HealthCheckRequest())
        assert next(fourth).status == health_pb2.HealthCheckResponse.SERVING
        for stream in held[1:] + [fourth]:
            stream.cancel()
    finally:
        channel.close()
        running.stop(0)
