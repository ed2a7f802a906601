"""README.md's "Adding a node" block as the lab reads it (vagrant/readme_steps.py).

The lab (vagrant/labctl.py add-node, tests/bench/lab.py) adds its last agent by these steps, read
from the README at run time; here, without a VM: the block parses into the steps an admin is told
to take, a block that changed shape is refused with a message naming the line, and the
certificate steps, run as written with the real gleanctl on stand-in machines (directories),
give the node a key, a certificate the lab CA signed for it, and an agent.toml that joins a pool.
"""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "vagrant"))
import readme_steps  # noqa: E402
from readme_steps import ReadmeError, Step  # noqa: E402

README = (REPO / "README.md").read_text()
LAB_NAMES = {"node1": "node2", "node1.example.org": "node2", "ctl.example.org:7450": "10.77.0.10:7450",
             "/root/gleaner-ca": "/var/lib/gleaner/lab/pki"}
GLEANCTL = [sys.executable, "-m", "controller.gleanctl"]


def test_the_readme_block_is_the_steps_the_lab_runs():
    steps = readme_steps.parse(README)
    assert [(s.where, s.kind) for s in steps] == [
        ("node", "run"), ("node", "run"), ("node", "copy"), ("ca", "run"), ("ca", "copy"), ("node", "run"),
        ("node", "run"), ("admin", "run")]
    setup, request, csr, sign, back, config, unit, nodes = steps
    assert setup.command == "bash scripts/setup-role.sh agent"
    assert request.command == "gleanctl pki request /etc/gleaner/pki agent node1"
    assert csr.files == ("/etc/gleaner/pki/agent-node1.csr",) and csr.to == "ca" and csr.to_dir == ""
    assert sign.command.startswith("gleanctl pki sign /root/gleaner-ca agent-node1.csr")
    assert back.files == ("agent-node1.pem", "/root/gleaner-ca/ca.pem") and back.to == "node"
    assert back.to_dir == "/etc/gleaner/pki"
    assert config.command.startswith("cat > /etc/gleaner/agent.toml <<'TOML'\n") and config.command.endswith("\nTOML")
    assert "[controller]" in config.command   # without it the agent never joins (issue 27, item 6)
    assert unit.command == "systemctl enable --now gleaner-agent"
    assert nodes.command == "gleanctl nodes"
    assert README.splitlines()[setup.line - 1].startswith(setup.command)   # lines are README's own


def test_the_lab_names_replace_every_example_name():
    steps = readme_steps.substitute(readme_steps.parse(README), LAB_NAMES)
    text = "\n".join([s.command for s in steps] + [f for s in steps for f in s.files])
    assert "example.org" not in text and "/root/gleaner-ca" not in text
    assert not re.search(r"\bnode1\b", text)
    assert "gleanctl pki sign /var/lib/gleaner/lab/pki agent-node2.csr --host node2" in text
    assert 'address = "10.77.0.10:7450"' in text and "/etc/gleaner/pki/agent-node2.key" in text
    with pytest.raises(ValueError, match="not placeholders"):
        readme_steps.substitute(steps, {"node9": "x"})


def block_of(body: str, heading: str = "**Adding a node** (node1, to `ctl.example.org:7450`):") -> str:
    return f"# Title\n\n{heading}\n\n```\n{body}\n```\n\nAfter.\n"


GOOD = """\
gleanctl pki request /etc/gleaner/pki agent node1   # on node1: key
# copy /etc/gleaner/pki/agent-node1.csr from node1 to the CA's machine
gleanctl pki sign /root/gleaner-ca agent-node1.csr --host node1.example.org   # on the CA's machine
cat > /etc/gleaner/agent.toml <<'TOML'   # on node1
address = "ctl.example.org:7450"
TOML"""


def test_a_block_of_the_known_shape_parses():
    steps = readme_steps.parse(block_of(GOOD))
    assert [s.line for s in steps] == [6, 7, 8, 9]
    assert steps[3] == Step(line=9, where="node", command="cat > /etc/gleaner/agent.toml <<'TOML'\n"
                                                          'address = "ctl.example.org:7450"\nTOML')


@pytest.mark.parametrize("text, message", [
    ("# Title\n\nNo such paragraph.\n", "no paragraph starting with '**Adding a node**'"),
    ("**Adding a node**: run setup.\n\nThen more prose.\n\nAnd more.\n\nAnd more.\n\n```\nx\n```\n",
     "no ``` code block within 5 lines"),
    ("**Adding a node**\n\n```\ngleanctl nodes  # on node1\n", "line 3: the 'Adding a node' code block is never closed"),
    (block_of("\n# only a remark\n"), "has no steps"),
    (block_of("gleanctl nodes   # on the moon: far"), "line 6: 'the moon' is not a place the lab knows"),
    (block_of("gleanctl nodes"), "line 6: the first command does not say where it runs"),
    (block_of("# copy agent-node1.pem to node1"), "line 6: a copy must read '# copy FILE"),
    (block_of("# copy a b from node1 to the CA's machine"), "cannot tell the files apart in 'a b'"),
    (block_of("cat > /etc/x <<'TOML'   # on node1\nid = 1"), "line 6: the heredoc is not closed by a line 'TOML'"),
    (block_of(GOOD.replace("/root/gleaner-ca", "/srv/ca")), "no longer names /root/gleaner-ca"),
    (block_of(GOOD.replace("ctl.example.org:7450", "ctl:7450")), "no longer names ctl.example.org:7450"),
])
def test_a_block_that_changed_shape_is_refused_naming_what_changed(text, message):
    with pytest.raises(ReadmeError) as caught:
        readme_steps.parse(text)
    assert message in str(caught.value)


class SandboxNode(readme_steps.HostMachine):
    """README's node as a directory: its / is ROOT. gleanctl runs for real; the heredoc is
    written; what needs a real host (setup-role.sh, systemctl) is only recorded."""

    def __init__(self, root: Path) -> None:
        super().__init__(GLEANCTL, root, {"PYTHONPATH": str(REPO)})
        self.root, self.skipped = root, []

    def run(self, command: str) -> str:
        head = command.splitlines()[0]
        heredoc = re.match(r"cat > (\S+) <<'(\w+)'$", head)
        if heredoc:
            target = Path(heredoc[1])
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("\n".join(command.splitlines()[1:-1]) + "\n")
            return ""
        if shlex.split(head)[0] in ("bash", "systemctl"):
            self.skipped.append(command)
            return ""
        return super().run(command)


def test_the_readme_certificate_steps_run_as_written_give_the_node_what_it_joins_with(tmp_path):
    """Every step but those needing a real host, with the real gleanctl: the CA in a directory,
    the node's / in another (its /etc/gleaner moved there), files carried as the README says."""
    from gleaner_common.pki import describe
    from nodeagent.config import load_config
    ca_dir, node_root, work = tmp_path / "ca", tmp_path / "node", tmp_path / "work"
    work.mkdir()
    node_root.mkdir()
    subprocess.run([*GLEANCTL, "pki", "init", str(ca_dir)], cwd=REPO, check=True, capture_output=True)
    names = {**LAB_NAMES, "/root/gleaner-ca": str(ca_dir)}
    steps = [Step(**{**s.__dict__, "command": s.command.replace("/etc/gleaner", f"{node_root}/etc/gleaner"),
                     "files": tuple(f.replace("/etc/gleaner", f"{node_root}/etc/gleaner") for f in s.files),
                     "to_dir": s.to_dir.replace("/etc/gleaner", f"{node_root}/etc/gleaner")})
             for s in readme_steps.substitute(readme_steps.parse(README), names) if s.where != "admin"]
    node = SandboxNode(node_root)
    done = readme_steps.follow(steps, {"node": node, "ca": readme_steps.HostMachine(GLEANCTL, work, {
        "PYTHONPATH": str(REPO)})})
    assert len(done) == len(steps)
    assert node.skipped == ["bash scripts/setup-role.sh agent", "systemctl enable --now gleaner-agent"]
    config = load_config(node_root / "etc/gleaner/agent.toml")
    assert config.agent_id == "node2" and config.controller_address == "10.77.0.10:7450"
    cert = describe(config.tls.cert)
    assert (cert["role"], cert["name"]) == ("agent", "node2")
    assert (config.tls.key.stat().st_mode & 0o077) == 0          # the key never left the node, 0600
    assert not (ca_dir / "agent-node2.key").exists() and not (work / "agent-node2.key").exists()
    assert config.tls.ca.read_bytes() == (ca_dir / "ca.pem").read_bytes()
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import load_pem_private_key
    signed = x509.load_pem_x509_certificate(config.tls.cert.read_bytes())
    key = load_pem_private_key(config.tls.key.read_bytes(), None)
    assert signed.public_key() == key.public_key()
    signed.verify_directly_issued_by(x509.load_pem_x509_certificate(config.tls.ca.read_bytes()))


def test_a_failing_step_names_its_readme_line(tmp_path):
    steps = [Step(line=374, where="ca", command="gleanctl pki sign /nonexistent agent-node2.csr")]
    with pytest.raises(readme_steps.StepFailed, match=r"README.md line 374 \(on ca: gleanctl pki sign"):
        readme_steps.follow(steps, {"ca": readme_steps.HostMachine(GLEANCTL, tmp_path, {"PYTHONPATH": str(REPO)})})
    with pytest.raises(readme_steps.StepFailed, match="runs only gleanctl on this host"):
        readme_steps.follow([Step(line=1, where="ca", command="rm -rf /tmp/x")],
                            {"ca": readme_steps.HostMachine(GLEANCTL, tmp_path)})


def test_setup_role_puts_gleanctl_on_path_for_the_steps_after_it():
    """The README runs `gleanctl pki request` on the node right after `setup-role.sh agent`: the
    script installs the wrapper as scripts/setup.sh does (the lab run proves it on a fresh VM)."""
    script = (REPO / "scripts/setup-role.sh").read_text().splitlines()
    assert any(line.strip().startswith('install_gleanctl "$PREFIX"') for line in script)
    steps = readme_steps.parse(README)
    assert steps[0].command.startswith("bash scripts/setup-role.sh agent")
    assert steps[1].where == "node" and steps[1].command.startswith("gleanctl ")


def test_the_smoke_run_fails_when_the_readme_node_did_not_join():
    from tests.bench import lab
    passing = {"preempted_most_recent": True, "preempted_outcome": "clean_shutdown", "rejoined": True,
               "cleaned": True, "services": {"x": {"role": "none"}}, "replay": {"items": 2, "unexplained": 0}}
    assert lab.verdict({**passing, "added_node": "node2", "added_node_joined": True})["ok"]
    assert lab.verdict({**passing, "added_node": None})["ok"]
    decided = lab.verdict({**passing, "added_node": "node2", "added_node_joined": False})
    assert decided["failure_kind"] == "product"
    assert decided["problems"] == ["node2 did not join by README.md's 'Adding a node' steps"]
