"""`gleanctl pki`: sign reads the identity from the request, nothing is overwritten, and the CA
keeps an index that `pki list` shows (issue 23, item 4). The real CLI in a real process."""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import subprocess
import sys
from pathlib import Path

from cryptography import x509

from controller.gleanctl import main
from gleaner_common import pki

ROOT = Path(__file__).resolve().parents[2]


def gleanctl(*args: str) -> subprocess.CompletedProcess:
    """gleanctl's own main, in this process (a process each would cost a second of imports)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def gleanctl_process(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "controller.gleanctl", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)


def ok(*args: str) -> dict:
    out = gleanctl("--json", "pki", *args)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def snapshot(*directories: Path) -> dict[str, str]:
    """Every file under these directories and its content hash: what an attack must not change."""
    return {str(p): digest(p) for d in directories for p in sorted(d.rglob("*")) if p.is_file()
            and p.name != ".index.lock"}


def listing(ca: Path) -> list[dict]:
    return ok("list", str(ca))["certificates"]


def test_the_attack_a_request_for_an_agent_signed_as_admin_is_refused_and_nothing_changes(tmp_path):
    ca, node = tmp_path / "ca", tmp_path / "n2"
    ok("init", str(ca))
    csr = ok("request", str(node), "agent", "node2")["csr"]
    first = ok("sign", str(ca), csr, "agent", "node2")["cert"]
    (node / "agent-node2.pem").rename(node / "live.pem")   # the node's certificate, put in place
    ok("sign", str(ca), csr)                                # and a second one waiting beside it
    before = snapshot(ca, node)

    attack = gleanctl_process("pki", "sign", str(ca), csr, "admin", "node2")   # the very command, as run
    assert attack.returncode == 2
    assert "asks for agent/node2, but you named admin/node2" in attack.stderr and "nothing signed" in attack.stderr
    assert "Traceback" not in attack.stderr
    assert snapshot(ca, node) == before                     # byte for byte, the index too
    # and with the certificate moved away, still no admin certificate anywhere
    (node / "agent-node2.pem").unlink()
    assert gleanctl("pki", "sign", str(ca), csr, "admin", "node2").returncode == 2
    assert not list(node.glob("admin-*")) and not (node / "agent-node2.pem").exists()
    assert [e["role"] for e in listing(ca)] == ["ca", "agent", "agent"]
    assert Path(first).name == "agent-node2.pem"


def test_sign_takes_the_identity_from_the_request_and_refuses_a_different_name(tmp_path):
    ca, node = tmp_path / "ca", tmp_path / "node"
    ok("init", str(ca))
    csr = ok("request", str(node), "agent", "node7")["csr"]
    wrong = gleanctl("pki", "sign", str(ca), csr, "agent", "node8")
    assert wrong.returncode == 2 and "asks for agent/node7, but you named agent/node8" in wrong.stderr
    assert not (node / "agent-node7.pem").exists() and not (node / "agent-node8.pem").exists()
    signed = ok("sign", str(ca), csr, "--host", "10.0.0.7")      # no ROLE NAME: the request's
    info = ok("show", signed["cert"])
    assert (info["role"], info["name"], info["ip"]) == ("agent", "node7", ["10.0.0.7"])
    assert f"{info['serial']}.serial.node7.agent.gleaner" in info["dns"]   # the name clients pin


def test_a_request_naming_no_identity_or_two_is_refused(tmp_path):
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    ca = tmp_path / "ca"
    ok("init", str(ca))
    key = ec.generate_private_key(ec.SECP256R1())
    uris = [x509.UniformResourceIdentifier("spiffe://gleaner/agent/node1"),
            x509.UniformResourceIdentifier("spiffe://gleaner/admin/node1")]
    csr = (x509.CertificateSigningRequestBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME,
                                                                                              "node1")]))
           .add_extension(x509.SubjectAlternativeName(uris), critical=False).sign(key, hashes.SHA256()))
    path = tmp_path / "two.csr"
    path.write_bytes(csr.public_bytes(serialization.Encoding.PEM))
    out = gleanctl("pki", "sign", str(ca), str(path))
    assert out.returncode == 2 and "names 2 Gleaner identities" in out.stderr
    (tmp_path / "junk.csr").write_text("not a request")
    out = gleanctl("pki", "sign", str(ca), str(tmp_path / "junk.csr"))
    assert out.returncode == 2 and "not a PEM certificate signing request" in out.stderr
    assert [e["role"] for e in listing(ca)] == ["ca"]


def test_overwriting_is_refused_naming_the_file(tmp_path):
    ca, node = tmp_path / "ca", tmp_path / "node"
    ok("init", str(ca))
    ok("issue", str(ca), "admin", "alice")
    cert, key = ca / "admin-alice.pem", ca / "admin-alice.key"
    before = snapshot(ca)
    again = gleanctl("pki", "issue", str(ca), "admin", "alice")
    assert again.returncode == 2 and f"{cert} already exists; it is not overwritten" in again.stderr
    assert snapshot(ca) == before
    # sign: the certificate beside the request exists
    csr = ok("request", str(node), "agent", "node1")["csr"]
    ok("sign", str(ca), csr)
    before = snapshot(ca, node)
    again = gleanctl("pki", "sign", str(ca), csr)
    assert again.returncode == 2 and f"{node / 'agent-node1.pem'} already exists" in again.stderr
    assert snapshot(ca, node) == before
    # request: the key in use is never replaced
    again = gleanctl("pki", "request", str(node), "agent", "node1")
    assert again.returncode == 2 and "agent-node1.key already exists" in again.stderr
    assert snapshot(ca, node) == before
    # renew is the one way to replace, on purpose
    renewed = ok("renew", str(ca), str(cert))
    assert renewed["cert"] == str(cert) and digest(key) != before.get(str(key))


def test_the_index_records_init_issue_sign_renew_and_revoke(tmp_path):
    ca, node = tmp_path / "ca", tmp_path / "node"
    ok("init", str(ca))
    ok("issue", str(ca), "controller", "main", "--host", "ctl.example.org")
    ok("sign", str(ca), ok("request", str(node), "agent", "node1")["csr"])
    alice = ok("issue", str(ca), "admin", "alice")["cert"]
    old_serial = ok("show", alice)["serial"]
    ok("renew", str(ca), alice)
    new_serial = ok("show", alice)["serial"]
    ok("revoke", str(ca), new_serial, "--reason", "laptop lost")
    rows = listing(ca)
    assert [(r["role"], r["name"]) for r in rows] == [("ca", "ca"), ("controller", "main"), ("agent", "node1"),
                                                      ("admin", "alice"), ("admin", "alice")]
    by_serial = {r["serial"]: r for r in rows}
    assert by_serial[old_serial]["status"] == "valid"
    assert by_serial[new_serial]["status"] == "revoked" and by_serial[new_serial]["reason"] == "laptop lost"
    assert by_serial[new_serial]["revoked_at"]
    assert all(r["not_after"] for r in rows)
    assert int(new_serial, 16) in pki.load_deny_list(ca / "revoked.txt")
    # revoking twice changes nothing
    before = snapshot(ca)
    ok("revoke", str(ca), new_serial)
    assert snapshot(ca) == before
    # the index is one JSON document, written whole, with no temporary file left beside it
    assert json.loads((ca / "index.json").read_text())["format"] == pki.INDEX_FORMAT
    assert not [p for p in ca.iterdir() if p.name.endswith(".tmp")]
    text = gleanctl("pki", "list", str(ca))
    assert text.returncode == 0
    lines = text.stdout.splitlines()
    assert lines[0].split() == ["SERIAL", "ROLE", "NAME", "NOT", "AFTER", "STATUS", "FILE"]
    assert any(new_serial in line and "revoked (laptop lost)" in line for line in lines)
    assert len(lines) == 6


def test_a_ca_without_an_index_is_listed_from_its_files_and_gets_one_at_the_next_change(tmp_path):
    ca = tmp_path / "ca"
    ok("init", str(ca))
    bob = ok("issue", str(ca), "viewer", "bob")["cert"]
    ok("revoke", str(ca), "abc123")                 # a serial issued elsewhere
    (ca / "index.json").unlink()                    # a CA made before the index existed
    (tmp_path / "stranger").mkdir()
    pki.init_ca(tmp_path / "stranger")
    other = pki.issue(tmp_path / "stranger", pki.Role.ADMIN, "eve")
    (ca / "admin-eve.pem").write_bytes(other.cert.read_bytes())   # another CA's: not this CA's issue
    shown = ok("list", str(ca))
    assert shown["rebuilt"] is True
    rows = {r["serial"]: r for r in shown["certificates"]}
    assert rows[ok("show", bob)["serial"]]["role"] == "viewer"
    assert rows["abc123"]["status"] == "revoked" and rows["abc123"]["role"] == ""
    assert ok("show", str(ca / "admin-eve.pem"))["serial"] not in rows
    assert "no index.json yet" in gleanctl("pki", "list", str(ca)).stdout
    ok("issue", str(ca), "admin", "alice")
    kept = ok("list", str(ca))
    assert kept["rebuilt"] is False and len(kept["certificates"]) == len(rows) + 1


def test_an_unreadable_index_is_a_clear_error(tmp_path):
    ca = tmp_path / "ca"
    ok("init", str(ca))
    (ca / "index.json").write_text("{ not json")
    out = gleanctl("pki", "list", str(ca))
    assert out.returncode == 2 and f"index {ca / 'index.json'} cannot be read" in out.stderr
    assert "Traceback" not in out.stderr
    out = gleanctl("pki", "sign", str(tmp_path / "nothing"), str(tmp_path / "x.csr"))
    assert out.returncode == 2 and "Traceback" not in out.stderr
