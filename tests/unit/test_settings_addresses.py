"""An agent address is a host and a port, nothing else (issue 23, item 3): the reported address
on the real report path (in-process controller, real PoolService and SQLite store, real gRPC with
mutual TLS and an agent's certificate), and the agent's own configured addresses.

gRPC reads `unix:80` as the unix socket ./80 and `dns:80` as host 80; a report that could set
such an address would make the controller dial wherever its agent chose."""
from __future__ import annotations

import socket
from pathlib import Path

import grpc
import pytest

from controller.agents import AgentLinks
from controller.config import ControllerConfig
from controller.server import build_server
from controller.service import PoolService
from controller.store import Store
from gleaner_common import pki
from gleaner_common.config import ConfigError, TlsConfig, host_port_problem
from gleaner_common.identity import Role
from gleaner_common.rpc import channel_to
from nodeagent.config import AgentConfig, check_config as check_agent
from protos import controller_pb2, controller_pb2_grpc

GOOD = "127.0.0.1:7443"
# (address, what the refusal says): every one a gRPC target or a string that is not HOST:PORT
ATTACKS = [
    ("unix:80", "gRPC scheme"),
    ("UNIX:80", "gRPC scheme"),
    ("unix-abstract:80", "gRPC scheme"),
    ("dns:80", "gRPC scheme"),
    ("ipv4:80", "gRPC scheme"),
    ("ipv6:80", "gRPC scheme"),
    ("xds:80", "gRPC scheme"),
    ("vsock:80", "gRPC scheme"),
    ("dns:///evil.example:80", "not an IPv4 address, a [bracketed] IPv6 address or a DNS name"),
    ("unix:/run/gleaner/agent.sock", "port"),
    ("unix-abstract:gleaner", "port"),
    ("ipv4:127.0.0.1:80", "not an IPv4 address, a [bracketed] IPv6 address or a DNS name"),
    ("user@host.example:80", "not an IPv4 address, a [bracketed] IPv6 address or a DNS name"),
    ("host.example/path:80", "not an IPv4 address, a [bracketed] IPv6 address or a DNS name"),
    ("host example:80", "not an IPv4 address, a [bracketed] IPv6 address or a DNS name"),
    ("host.example:80 ", "port"),
    ("-host.example:80", "not an IPv4 address, a [bracketed] IPv6 address or a DNS name"),
    ("host.example:0", "port '0' is not a number within 1..65535"),
    ("host.example:65536", "port '65536'"),
    ("host.example:+80", "port '+80'"),
    ("host.example:", "port ''"),
    ("host.example", "no HOST before a :PORT"),
    (":80", "no HOST"),
    ("999.1.1.1:80", "'999.1.1.1' is not an IPv4 address"),
    ("1.2.3:80", "'1.2.3' is not an IPv4 address"),
    ("[::1%lo]:80", "is not an IPv6 address"),
    ("[not-v6]:80", "is not an IPv6 address"),
    ("::1:80", "not an IPv4 address, a [bracketed] IPv6 address or a DNS name"),
    (("a" * 63 + ".") * 3 + "b" * 63 + ":80", "253 in all"),
    ("a" * 64 + ".example:80", "at most 63 each"),
    ("x" * 300 + ":80", "longer than 259 characters"),
]
FINE = ["127.0.0.1:7443", "[::1]:7443", "[2001:db8::1]:1", "node1:65535", "node-1.example.org:7443",
        "NODE1.Example.ORG:7443", "unix1:80", "dnsname:80", "unix.example.org:80", ("a" * 63 + ".") * 3 + "b:1"]


@pytest.mark.parametrize("address, says", ATTACKS)
def test_what_is_not_host_and_port_is_refused_with_the_reason(address, says):
    problem = host_port_problem(address)
    assert problem is not None and says in problem, problem


@pytest.mark.parametrize("address", FINE)
def test_a_host_and_port_passes(address):
    assert host_port_problem(address) is None


@pytest.fixture
def controller(tmp_path, monkeypatch):
    """An in-process controller with mutual TLS, node1 up at GOOD, real agent links (timeout 1 s)
    and a unix socket listening at ./80 in its working directory (the one `unix:80` names)."""
    monkeypatch.chdir(tmp_path)
    lab = pki.ensure_lab_pki(tmp_path / "pki", ("node1",))
    tls = TlsConfig(ca=lab.controller.ca, cert=lab.controller.cert, key=lab.controller.key)
    config = ControllerConfig(state_dir=tmp_path / "state", listen="127.0.0.1:0", tls=tls,
                              agent_timeout_seconds=1.0)
    (tmp_path / "state").mkdir()
    store = Store(config.store_path)
    links = AgentLinks(config.tls.files, config.agent_timeout_seconds)
    pool = PoolService(config, store, links)
    server = build_server(config, pool, lambda _config: None)
    trap = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    trap.bind("80")
    trap.listen(8)
    trap.settimeout(0.5)
    channel = channel_to(Role.CONTROLLER, "", f"127.0.0.1:{server.port}", lab.agent("node1"))
    stub = controller_pb2_grpc.ControllerStub(channel)
    assert report(stub, GOOD) is None   # node1 joins at the good address
    try:
        yield pool, stub, trap
    finally:
        channel.close()
        trap.close()
        server.stop(grace=1)
        pool.executor.shutdown(wait=True)
        pool.close()
        links.close()
        store.close()


def report(stub, address: str) -> grpc.RpcError | None:
    message = controller_pb2.NodeReport(node_id="node1", agent_address=address, cpus=4, memory_mib=8192,
                                        images=["tiny"], min_memory_mib=32)
    try:
        stub.Report(iter([message]), timeout=10)
    except grpc.RpcError as exc:
        return exc
    return None


def node_facts(pool) -> list[tuple]:
    return [(node.node_id, node.state, node.address, node.capacity) for node, *_ in pool.node_rows()]


def test_every_attack_address_is_refused_on_the_report_path_and_changes_nothing(controller):
    pool, stub, _trap = controller
    before = node_facts(pool)
    assert before == [("node1", "up", GOOD, before[0][3])]
    for address, says in ATTACKS:
        refused = report(stub, address)
        assert refused is not None, f"{address!r} was taken"
        assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT, (address, refused.details())
        assert "report refused: agent_address" in refused.details() and says in refused.details(), refused.details()
        assert node_facts(pool) == before, address
    assert pool.store.count_events("report.refused") >= 1   # audited (once a minute per node)


def test_the_controller_never_dials_a_socket_a_report_names(controller):
    """With `unix:80` taken, placing a VM on node1 would connect to ./80 and send a TLS
    ClientHello there; refused, the launch goes to node1's real address (nothing listens)."""
    pool, stub, trap = controller
    report(stub, "unix:80")   # refused (as the test above shows); the proof is what follows
    result = pool.request(1, 128, "tiny", "alice", "r-unix", wait_seconds=3)
    assert result.record.outcome in ("pending", "failed", "rejected"), result.record
    with pytest.raises(socket.timeout):
        connection, _ = trap.accept()
        connection.close()


@pytest.mark.parametrize("key, field", [("controller_address", "controller.address"),
                                        ("advertise_address", "controller.advertise")])
@pytest.mark.parametrize("address, says", [a for a in ATTACKS if a[0] != "host.example:80 "][:12])
def test_the_agent_refuses_such_addresses_in_its_own_config(key, field, address, says):
    values = dict(listen="unix:/run/gleaner/agent.sock", tls=TlsConfig(insecure=True),
                  controller_address="ctl.example.org:7450", advertise_address="node1.example.org:7443")
    with pytest.raises(ConfigError) as err:
        check_agent(AgentConfig(**{**values, key: address}), "/etc/gleaner/agent.toml")
    assert f"/etc/gleaner/agent.toml: {field}" in str(err.value) and says in str(err.value)
    check_agent(AgentConfig(**values), "/etc/gleaner/agent.toml")   # and the good ones pass


def test_the_address_an_agent_makes_from_its_listen_is_checked_too(monkeypatch):
    """Without controller.advertise the agent reports listen's host, or this host's name for a
    wildcard: a host named like a gRPC scheme is refused at start, pointing to advertise."""
    monkeypatch.setattr(socket, "gethostname", lambda: "unix")
    config = AgentConfig(listen="0.0.0.0:7443", tls=TlsConfig(ca=Path("/p/ca.pem"), cert=Path("/p/a.pem"), key=Path("/p/a.key")),
                         controller_address="ctl.example.org:7450")
    with pytest.raises(ConfigError, match=r"'unix:7443' \(from agent.listen\), must be HOST:PORT: host 'unix' is a "
                                          r"gRPC scheme .*; set controller.advertise"):
        check_agent(config, "agent.toml")
    monkeypatch.setattr(socket, "gethostname", lambda: "node1")
    check_agent(config, "agent.toml")
