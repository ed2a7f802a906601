"""The authorization interceptor on a real gRPC server with mutual TLS (health and reflection
services, which every Gleaner server carries), with certificates from the project's PKI."""
from __future__ import annotations

import logging
import threading
import time

import grpc
import pytest
from cryptography import x509
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gleaner_common import pki
from gleaner_common.authz import EVERYONE, DenialCounter, DenyList, Limits, Rule
from gleaner_common.identity import Role
from gleaner_common.rpc import ServerSettings, channel_to, client_channel, start_server
from tests.agentproc import odd_certificate

CHECK = "/grpc.health.v1.Health/Check"
WATCH = "/grpc.health.v1.Health/Watch"
SLOW = "/gleaner.test.Slow/"
OPEN = {CHECK: Rule(EVERYONE), WATCH: Rule(EVERYONE), **{f"{SLOW}{m}": Rule(EVERYONE) for m in ("Wait", "Poll", "Send")}}


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    return pki.ensure_lab_pki(tmp_path_factory.mktemp("pki"), ("node1", "node2"))


def serve(lab, rules=None, limits=None, release: threading.Event | None = None, deny_list=None):
    deny = DenyList(deny_list or lab.deny_list)
    settings = ServerSettings("127.0.0.1:0", lab.agent("node1"), deny, limits or Limits(), workers=16)
    running = start_server(settings, "gleaner.test", slow_service(release or threading.Event()), rules)
    return running, f"127.0.0.1:{running.port}"


def slow_service(release: threading.Event):
    """Calls that last (bytes in, bytes out): Wait until `release`, Poll streams nothing and polls
    is_active() as WatchEvents does, Send counts a client stream's messages."""
    def wait(_request, _context):
        release.wait(10)
        return b""

    def poll(_request, context):
        while context.is_active():
            time.sleep(0.05)
        yield from ()

    def send(requests, _context):
        return str(sum(1 for _ in requests)).encode()
    handlers = {"Wait": grpc.unary_unary_rpc_method_handler(wait), "Poll": grpc.unary_stream_rpc_method_handler(poll),
                "Send": grpc.stream_unary_rpc_method_handler(send)}
    return lambda server: server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("gleaner.test.Slow", handlers),))


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


def test_junk_bytes_are_invalid_argument_and_logged_once_per_flush(lab, caplog):
    running, address = serve(lab, OPEN)
    try:
        with client_channel(address, lab.viewer, None) as channel, \
                caplog.at_level(logging.WARNING, logger="gleaner_common.authz"):
            for _ in range(3):
                code, details = code_of(lambda: channel.unary_unary(CHECK)(b"\xff\xff\xff\xff\x0f", timeout=5))
                assert code == grpc.StatusCode.INVALID_ARGUMENT and f"not a valid message for {CHECK}" in details
        assert [r.getMessage() for r in caplog.records].count("rpc.unparsable") == 1
        assert [(who, n) for who, method, why, n in running.authorizer.denials.flush()
                if method == CHECK and why == "not a valid message"] == [("viewer/lab-viewer", 3)]
        assert code_of(lambda: check(address, lab.viewer))[0] == grpc.StatusCode.OK   # well-formed: served
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


def watch(channel):
    return health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest())


def test_streams_in_total_are_bounded_whoever_holds_them(lab):
    running, address = serve(lab, OPEN, Limits(streams_per_identity=2, streams_total=3))
    channels = {who: client_channel(address, tls) for who, tls in
                (("viewer", lab.viewer), ("admin", lab.admin), ("controller", lab.controller))}
    try:
        held = [watch(channels["viewer"]), watch(channels["viewer"]), watch(channels["admin"])]
        for stream in held:
            next(stream)
        late = watch(channels["controller"])
        code, details = code_of(lambda: next(late))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "holds 3 streams" in details
        assert code_of(lambda: check(address, lab.controller))[0] == grpc.StatusCode.OK  # calls still served
        held.pop().cancel()
        time.sleep(0.3)
        admitted = watch(channels["controller"])
        assert next(admitted).status == health_pb2.HealthCheckResponse.SERVING
        for stream in held + [admitted]:
            stream.cancel()
    finally:
        for channel in channels.values():
            channel.close()
        running.stop(0)


def test_calls_per_identity_are_bounded(lab):
    release = threading.Event()
    running, address = serve(lab, OPEN, Limits(calls_per_identity=2), release)
    viewer = client_channel(address, lab.viewer)
    try:
        wait = viewer.unary_unary(f"{SLOW}Wait")
        busy = [wait.future(b"", timeout=10) for _ in range(2)]
        time.sleep(0.5)  # both in the server now
        code, details = code_of(lambda: wait(b"", timeout=5))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "2 calls in progress" in details
        assert code_of(lambda: check(address, lab.admin))[0] == grpc.StatusCode.OK  # another identity is served
        release.set()
        for call in busy:
            call.result(timeout=10)
        assert code_of(lambda: wait(b"", timeout=5))[0] == grpc.StatusCode.OK  # its places came back
    finally:
        release.set()
        viewer.close()
        running.stop(0)


def test_the_denial_counter_keeps_a_bounded_number_of_keys():
    counter = DenialCounter(max_keys=3)
    firsts = [counter.add(f"viewer/v{i}", "/x/Y", "no") for i in range(50)]
    rows = counter.flush()
    assert len(rows) == 4 and sum(n for *_, n in rows) == 50
    assert ("(other identities)", "(other methods)", "(other reasons)", 47) in rows
    assert firsts.count(True) == 4   # a log line for each key, none for the flood behind the catch-all
    assert counter.flush() == []


def test_a_flood_of_distinct_identities_costs_bounded_rows_and_log_lines(lab, tmp_path, caplog):
    people = [pki.issue(lab.directory, Role.VIEWER, f"flood{i}", out_dir=tmp_path) for i in range(12)]
    running, address = serve(lab, {CHECK: Rule(frozenset({Role.CONTROLLER}))})
    running.authorizer.denials.max_keys = 4
    try:
        with caplog.at_level(logging.WARNING, logger="gleaner_common.authz"):
            for tls in people:
                assert code_of(lambda: check(address, tls))[0] == grpc.StatusCode.PERMISSION_DENIED
            assert running.authorizer.log_denials(60) == 5
        assert len([r for r in caplog.records if r.getMessage() == "rpc.denied"]) == 5
        summary = [r for r in caplog.records if r.getMessage() == "rpc.denied_summary"]
        assert sum(r.count for r in summary) == 12 and [r.method for r in summary].count(CHECK) == 4
    finally:
        running.stop(0)


def test_denials_of_revoked_and_foreign_certificates_name_the_call(lab, tmp_path):
    erin = pki.issue(lab.directory, Role.VIEWER, "erin", out_dir=tmp_path)
    foreign = odd_certificate(lab, tmp_path, "foreign", [x509.DNSName("nobody.example")])
    deny = tmp_path / "revoked.txt"
    deny.write_text(f"{x509.load_pem_x509_certificate(erin.cert.read_bytes()).serial_number:x}\n")
    running, address = serve(lab, deny_list=deny)
    try:
        for tls, why in ((erin, "revoked"), (foreign, "not a Gleaner identity")):
            code, details = code_of(lambda: check(address, tls))
            assert code == grpc.StatusCode.PERMISSION_DENIED and why in details
            assert f"may not call {CHECK}" in details, details
    finally:
        running.stop(0)


def serve_with_a_revoked_viewer(lab, tmp_path, name: str):
    """A server whose deny list (revoked.txt) revokes viewer `name`: (server, address, the
    viewer's files, its serial, the deny list's path)."""
    viewer = pki.issue(lab.directory, Role.VIEWER, name, out_dir=tmp_path)
    serial = x509.load_pem_x509_certificate(viewer.cert.read_bytes()).serial_number
    deny = tmp_path / "revoked.txt"
    deny.write_text(f"{serial:x}  # {name}\n")
    running, address = serve(lab, deny_list=deny)
    return running, address, viewer, serial, deny


def test_a_bad_deny_list_on_reload_keeps_the_one_in_force(lab, tmp_path, caplog):
    running, address, fred, serial, deny = serve_with_a_revoked_viewer(lab, tmp_path, "fred")
    try:
        deny.write_text(f"# a comment\n{serial:x}\nnot-a-serial\n")
        with caplog.at_level(logging.ERROR, logger="gleaner_common.authz"):
            assert running.authorizer.reload_deny_list() is False
        (record,) = [r for r in caplog.records if r.getMessage() == "tls.deny_list_rejected"]
        assert record.file == str(deny) and record.line == 3 and "not-a-serial" in record.error
        assert running.authorizer.deny_list.serials == {serial}
        assert code_of(lambda: check(address, fred))[0] == grpc.StatusCode.PERMISSION_DENIED
        deny.write_text("")
        assert running.authorizer.reload_deny_list() is True
        assert code_of(lambda: check(address, fred))[0] == grpc.StatusCode.OK
    finally:
        running.stop(0)


def test_a_deny_list_gone_at_reload_keeps_the_one_in_force(lab, tmp_path):
    """A file moved away mid-rewrite must not lift every revocation."""
    running, address, hank, serial, deny = serve_with_a_revoked_viewer(lab, tmp_path, "hank")
    try:
        deny.unlink()
        assert running.authorizer.reload_deny_list() is False
        assert running.authorizer.deny_list.serials == {serial}
        assert code_of(lambda: check(address, hank))[0] == grpc.StatusCode.PERMISSION_DENIED
    finally:
        running.stop(0)


def test_a_reload_ends_the_open_streams_of_revoked_identities(lab, tmp_path):
    gina = pki.issue(lab.directory, Role.VIEWER, "gina", out_dir=tmp_path)
    deny = tmp_path / "revoked.txt"
    running, address = serve(lab, OPEN, deny_list=deny)
    running.authorizer.revoked_stream_grace = 0.5
    channel, others = client_channel(address, gina), client_channel(address, lab.viewer)
    stop = threading.Event()

    def messages():
        while not stop.is_set():
            yield b"report"
            time.sleep(0.1)
    try:
        polling = channel.unary_stream(f"{SLOW}Poll")(b"", timeout=30)
        sending = channel.stream_unary(f"{SLOW}Send").future(messages(), timeout=30)
        quiet, bystander = watch(channel), watch(others)
        next(quiet), next(bystander)
        time.sleep(0.3)
        deny.write_text(f"{x509.load_pem_x509_certificate(gina.cert.read_bytes()).serial_number:x}\n")
        started = time.monotonic()
        assert running.authorizer.reload_deny_list()
        code, details = code_of(lambda: list(polling))   # it polls is_active(): denied within its poll
        assert code == grpc.StatusCode.PERMISSION_DENIED and "revoked" in details and f"{SLOW}Poll" in details
        with pytest.raises(grpc.RpcError) as sent:
            sending.result(timeout=5)                    # denied at its next message
        assert sent.value.code() == grpc.StatusCode.PERMISSION_DENIED and f"{SLOW}Send" in sent.value.details()
        assert time.monotonic() - started < 0.5
        code, _ = code_of(lambda: list(quiet))            # silent: cancelled after the grace
        assert code == grpc.StatusCode.CANCELLED
        assert bystander.is_active()                      # another identity's stream goes on
        bystander.cancel()
    finally:
        stop.set()
        channel.close()
        others.close()
        running.stop(0)
