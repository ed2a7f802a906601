"""Trust without servers: the authorization table, the PKI command, private files, log escaping,
and the controller and gleanctl staying clear of the agent's package."""
from __future__ import annotations

import json
import logging
import re
import stat
import subprocess
import sys

import pytest

from controller.gleanctl import main as gleanctl
from controller.store import Store
from gleaner_common import pki
from gleaner_common.authz import TABLE
from gleaner_common.identity import Role, parse_uri
from gleaner_common.logs import LogfmtFormatter, log_event
from protos import agent_pb2, controller_pb2
from tests.agentproc import modules_loaded_by, REPO


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_controller_and_gleanctl_load_neither_the_agent_nor_libvirt():
    assert modules_loaded_by(["controller.cli", "controller.server", "controller.service", "controller.gleanctl",
                              "controller.agents", "controller.demo"], ("nodeagent", "libvirt", "pyroute2")) == []


def test_the_table_covers_every_method_of_both_services_and_the_docs_show_it():
    methods = {f"/{service.full_name}/{m.name}" for descriptor in (agent_pb2.DESCRIPTOR, controller_pb2.DESCRIPTOR)
               for service in descriptor.services_by_name.values() for m in service.methods}
    assert methods <= set(TABLE), methods - set(TABLE)
    # the table lives in docs/security.md, under its own heading
    security = (REPO / "docs" / "security.md").read_text()
    shown_table = security.split("## Who may call what", 1)[1].split("\n## ", 1)[0]
    for method in methods:
        roles = sorted(r.value for r in TABLE[method].roles)
        name = method.rsplit("/", 1)[1]
        row = re.search(rf"^\| `{name}` \|([^\n]*)$", shown_table, re.M)
        assert row, f"the authorization table in docs/security.md has no row for {name}"
        cells = [c.strip() for c in row.group(1).split("|")]
        shown = sorted(role for role, cell in zip(("controller", "agent", "admin", "viewer", "tenant-admin"), cells) if cell)
        assert shown == roles, (name, shown, roles)


def run_pki(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "controller.gleanctl", "--json", "pki", *args], capture_output=True,
                         text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_the_pki_command_keeps_the_ca_key_off_the_node(tmp_path):
    ca_dir, node_dir = tmp_path / "ca", tmp_path / "node"
    run_pki("init", str(ca_dir))
    assert mode(ca_dir) == 0o700 and mode(ca_dir / "ca.key") == 0o600
    issued = run_pki("issue", str(ca_dir), "admin", "alice", "--days", "7")
    assert mode(ca_dir / "admin-alice.key") == 0o600
    alice = run_pki("show", issued["cert"])
    assert alice["identity"] == "spiffe://gleaner/admin/alice" and alice["dns"] == []
    # on the node: a key and a request; on the CA's machine: the signature
    csr = run_pki("request", str(node_dir), "agent", "node7")["csr"]
    cert = run_pki("sign", str(ca_dir), csr, "agent", "node7", "--host", "10.0.0.7")["cert"]
    node7 = run_pki("show", cert)
    assert node7["identity"] == "spiffe://gleaner/agent/node7"
    assert "node7.agent.gleaner" in node7["dns"] and node7["ip"] == ["10.0.0.7"]
    assert sorted(p.name for p in node_dir.iterdir()) == ["agent-node7.csr", "agent-node7.key", "agent-node7.pem"]
    assert not list(ca_dir.glob("agent-node7*"))
    renewed = run_pki("renew", str(ca_dir), issued["cert"])
    assert run_pki("show", renewed["cert"])["serial"] != alice["serial"]
    revoked = run_pki("revoke", str(ca_dir), renewed["cert"], "--reason", "left")
    assert int(revoked["serial"], 16) in pki.load_deny_list(ca_dir / "revoked.txt")
    # a CA is never silently replaced, and bad names are refused
    again = subprocess.run([sys.executable, "-m", "controller.gleanctl", "pki", "init", str(ca_dir)],
                           capture_output=True, text=True, cwd=REPO)
    assert again.returncode == 2 and "already holds a CA" in again.stderr
    bad = subprocess.run([sys.executable, "-m", "controller.gleanctl", "pki", "issue", str(ca_dir), "agent", "Node_7"],
                         capture_output=True, text=True, cwd=REPO)
    assert bad.returncode == 2 and "a DNS label" in bad.stderr


def test_identities_parse_strictly():
    assert parse_uri("spiffe://gleaner/agent/n1") == (Role.AGENT, "n1")
    for uri in ("spiffe://other/agent/n1", "spiffe://gleaner/root/x", "spiffe://gleaner/agent/N1",
                "spiffe://gleaner/admin/", "spiffe://gleaner/agent/n1/extra"):
        with pytest.raises(ValueError):
            parse_uri(uri)


def test_the_store_and_its_directory_are_private(tmp_path):
    store = Store(tmp_path / "state" / "controller.sqlite3")
    store.record("x.y")
    assert mode(tmp_path / "state") == 0o700
    for path in (tmp_path / "state").iterdir():  # the database and its -wal and -shm files
        assert mode(path) == 0o600, path
    store.close()


def test_log_lines_escape_control_characters_in_every_field(caplog):
    logger = logging.getLogger("test.trust")
    with caplog.at_level(logging.INFO, logger="test.trust"):
        log_event(logger, "vm.adopted", vm="evil\nts=forged level=error event=pwned", owner="\x1b[31mred\x1b[0m",
                  note="nul\x00 and\u2028separator")
    line = LogfmtFormatter().format(caplog.records[-1])
    assert "\n" not in line and "\x1b" not in line and "\x00" not in line and "\u2028" not in line
    assert 'vm="evil\\nts=forged level=error event=pwned"' in line
    assert 'owner="\\x1b[31mred\\x1b[0m"' in line and "\\u2028" in line


def test_gleanctl_pki_errors_are_usage_errors(tmp_path, capsys):
    assert gleanctl(["pki", "issue", str(tmp_path / "nothing"), "admin", "bob"]) == 2
    assert "no CA in" in capsys.readouterr().err


def test_a_bad_deny_list_stops_a_server_at_start_naming_the_file_and_line(tmp_path):
    from controller.config import ControllerConfig, to_toml as controller_toml
    from gleaner_common.config import TlsConfig
    from nodeagent.config import AgentConfig, to_toml as agent_toml
    lab = pki.ensure_lab_pki(tmp_path / "pki", ("n1",))
    lab.deny_list.write_text("# revoked\nabc123\nzz-top\n")

    def tls(files):
        return TlsConfig(ca=files.ca, cert=files.cert, key=files.key, deny_list=lab.deny_list)
    configs = {"controller": controller_toml(ControllerConfig(listen="127.0.0.1:0", state_dir=tmp_path / "ctl",
                                                              tls=tls(lab.controller))),
               "nodeagent": agent_toml(AgentConfig(agent_id="n1", listen="127.0.0.1:0", state_dir=tmp_path / "agent",
                                                   metrics_listen="", tls=tls(lab.agent("n1"))))}
    for module, text in configs.items():
        path = tmp_path / f"{module}.toml"
        path.write_text(text)
        done = subprocess.run([sys.executable, "-m", module, "--config", str(path)], capture_output=True, text=True,
                              cwd=REPO, timeout=60)
        assert done.returncode == 2, (module, done.stderr)
        assert f"deny list {lab.deny_list}, line 3: 'zz-top' is not a certificate serial" in done.stderr, done.stderr
    assert not (tmp_path / "ctl").exists()  # refused before the store was opened


@pytest.mark.parametrize("host", ["controller.gleaner", "node2.agent.gleaner", "*.agent.gleaner", "Controller.Gleaner.",
                                  "gleaner"])
def test_the_identities_own_server_names_cannot_be_added_as_hosts(tmp_path, capsys, host):
    """An agent certificate carrying controller.gleaner or another node's name would serve as them."""
    ca, node = tmp_path / "ca", tmp_path / "node"
    assert gleanctl(["pki", "init", str(ca)]) == 0
    assert gleanctl(["pki", "issue", str(ca), "agent", "node1", "--host", host]) == 2
    assert "is reserved" in capsys.readouterr().err
    assert not (ca / "agent-node1.pem").exists()
    assert gleanctl(["pki", "request", str(node), "agent", "node1"]) == 0
    assert gleanctl(["pki", "sign", str(ca), str(node / "agent-node1.csr"), "agent", "node1", "--host", host]) == 2
    assert "is reserved" in capsys.readouterr().err and not (node / "agent-node1.pem").exists()


def test_renew_away_from_the_ca_points_to_request_and_sign(tmp_path, capsys):
    ca, node = tmp_path / "ca", tmp_path / "node"
    assert gleanctl(["pki", "init", str(ca)]) == 0
    assert gleanctl(["pki", "issue", str(ca), "agent", "node1", "--out", str(node)]) == 0
    capsys.readouterr()
    assert gleanctl(["pki", "renew", str(node), str(node / "agent-node1.pem")]) == 2
    err = capsys.readouterr().err
    assert "renew runs on the CA's machine" in err and "gleanctl pki request" in err


def test_the_pool_demo_writes_an_agent_config_the_agent_accepts(tmp_path):
    """controller.demo writes the agent's TOML without the agent's package; the agent reads it."""
    from controller.demo import NODE, Lab
    from nodeagent.config import check_config, load_config
    lab = Lab(tmp_path, 7450, "qemu", tmp_path / "images")
    config = load_config(tmp_path / "agent.toml")
    check_config(config, "demo")
    assert (config.agent_id, config.listen, config.metrics_listen) == (NODE, "127.0.0.1:7451", "127.0.0.1:7452")
    assert (config.controller_address, config.controller_report_seconds) == ("127.0.0.1:7450", 1.0)
    assert (config.domain_type, config.grace_seconds, config.state_dir) == ("qemu", 15, tmp_path / "agent")
    assert config.tls.files == lab.pki.agent(NODE) and config.tls.deny_list == lab.pki.deny_list


def test_every_call_of_the_agent_demo_has_a_deadline(tmp_path):
    from nodeagent import demo

    console = tmp_path / "console.log"
    console.write_text("GLEANER-READY\n")
    calls = []

    class Stub:
        def __getattr__(self, method):
            def call(request, **kwargs):
                calls.append((method, kwargs.get("timeout")))
                domain = agent_pb2.Domain(name=getattr(request, "name", ""), console_log=str(console))
                return {"DescribeHost": agent_pb2.HostDescription(), "ListDomains": agent_pb2.ListDomainsResponse(),
                        "LaunchDomain": agent_pb2.LaunchDomainResponse(domain=domain, created=True),
                        "TerminateDomain": agent_pb2.TerminateDomainResponse(name=domain.name)}[method]
            return call
    demo.run_demo(Stub(), once=True)
    assert {m for m, _ in calls} == {"DescribeHost", "LaunchDomain", "ListDomains", "TerminateDomain"}
    assert all(timeout and 0 < timeout <= 300 for _, timeout in calls), calls


def test_the_agent_directories_are_0711_so_qemu_reaches_its_overlay_and_the_docs_say_so(tmp_path):
    from nodeagent.agent import make_directories
    from nodeagent.config import AgentConfig
    config = AgentConfig(state_dir=tmp_path / "agent")
    make_directories(config)
    assert mode(config.state_dir) == mode(config.overlay_dir) == 0o711 and mode(config.console_dir) == 0o700
    readme = (REPO / "README.md").read_text()
    assert "`overlays/` are 0711" in readme and "`.../agent` mode 0711" in readme
    assert "StateDirectoryMode=0711" in (REPO / "deploy/systemd/gleaner-agent.service").read_text()
