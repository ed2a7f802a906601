"""Certificates per identity: a CA, and certificates for the controller, each agent (bound to
its node), and each admin and viewer. Keys are written 0600 and never leave the machine that
made them; with `request` and `sign` not even an agent's key leaves its node, and the CA key
stays on the admin's machine.

Layout of a PKI directory (0700):
    ca.pem, ca.key                  the CA
    ROLE-NAME.pem, ROLE-NAME.key    one identity (agent-node1, controller-main, admin-alice,
                                    tenant-admin-acme+bob for bob, tenant-admin of acme, ...)
    revoked.txt                     the deny list: serial numbers (hex), one a line, '#' comments;
                                    servers read it at start and again on SIGHUP, clients whenever
                                    it changes (they check the servers they dial)
    index.json                      what this CA issued: serial, role, name, not-after, revoked
                                    (written whole, atomically; `gleanctl pki list` shows it)

Nothing is overwritten: issuing or signing for a file that exists is refused (renew is the one
way to replace a certificate, and says so), and `sign` takes the identity from the request itself.
"""
from __future__ import annotations

import datetime
import fcntl
import ipaddress
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .identity import (TRUST_DOMAIN, Identity, NotAnIdentity, Role, identity_of_certificate, parse_uri,
                       pinned_server_name, server_name_for, spiffe_uri)

CA_DAYS = 3650
# Short by default: services renew every few months, people every month.
DEFAULT_DAYS = {Role.CONTROLLER: 90, Role.AGENT: 90, Role.ADMIN: 30, Role.VIEWER: 30, Role.TENANT_ADMIN: 30}
SERVING_ROLES = (Role.CONTROLLER, Role.AGENT)
DENY_LIST = "revoked.txt"
INDEX = "index.json"
INDEX_FORMAT = 1
CA_ROLE = "ca"          # the index's role for the CA's own certificate
ORGANIZATION = "Gleaner"


class PkiError(RuntimeError):
    """The PKI directory or a certificate is missing or unusable; the message says what to do."""


class DenyListError(PkiError):
    """The deny list cannot be read; `path` and `line` (0: the whole file) say where."""

    def __init__(self, path: Path, line: int, message: str) -> None:
        super().__init__(f"deny list {path}" + (f", line {line}" if line else "") + f": {message}")
        self.path, self.line = path, line


@dataclass(frozen=True)
class TlsFiles:
    ca: Path
    cert: Path
    key: Path
    # Revoked serials this process refuses, as a client too (servers load theirs via authz.DenyList).
    # Not part of equality: the same certificate files are the same identity.
    deny_list: Path | None = field(default=None, compare=False)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _write_private(path: Path, data: bytes, replace: bool = True) -> None:
    """Write a file only root can read, never world-readable even for a moment; without
    `replace`, an existing file is refused (O_EXCL: no race between the check and the write)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if replace else os.O_EXCL)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        raise PkiError(f"{path} already exists; it is not overwritten") from None
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(path, 0o600)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def stem(role: Role, name: str) -> str:
    """ROLE-NAME; a tenant-admin's TENANT/PERSON is written TENANT+PERSON ('+' is in no name, so
    two tenant-admins never share a file, and '/' would make a directory)."""
    return f"{role.value}-{name.replace('/', '+')}"


def files_for(directory: Path, role: Role, name: str) -> TlsFiles:
    """An identity's files in `directory`. The suffix is appended, never substituted: a name may
    hold dots (alice.smith), which Path.with_suffix would cut, and two such names would share a file."""
    base = stem(role, name)
    return TlsFiles(directory / "ca.pem", directory / f"{base}.pem", directory / f"{base}.key")


def init_ca(directory: Path, days: int = CA_DAYS) -> Path:
    """A new CA in `directory`; refuses to replace one (every certificate hangs on it)."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    ca_pem, ca_key = directory / "ca.pem", directory / "ca.key"
    if ca_pem.exists() or ca_key.exists():
        raise PkiError(f"{directory} already holds a CA; remove ca.pem and ca.key first if you really "
                       "mean to replace it (every certificate it signed stops working)")
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
                      x509.NameAttribute(NameOID.COMMON_NAME, f"{ORGANIZATION} CA")])
    now = _now()
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    _write_private(ca_key, _key_pem(key))
    ca_pem.write_bytes(_cert_pem(cert))
    with _index_lock(directory):
        old_index = directory / INDEX
        if old_index.exists():   # a previous CA's (its ca.pem and ca.key were removed): kept aside
            os.replace(old_index, directory / f"{INDEX}.replaced")
        _save_index(Index(old_index, [_entry_of(cert, ca_pem, CA_ROLE, "ca")]))
    return ca_pem


def _load_ca(directory: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    try:
        cert = x509.load_pem_x509_certificate((directory / "ca.pem").read_bytes())
        key = serialization.load_pem_private_key((directory / "ca.key").read_bytes(), password=None)
    except FileNotFoundError as exc:
        raise PkiError(f"no CA in {directory} ({exc.filename} is missing); run 'gleanctl pki init {directory}' "
                       "on the machine that keeps the CA key") from None
    return cert, key  # type: ignore[return-value]


# -- the index: what this CA issued --------------------------------------------------------------

@dataclass
class IndexEntry:
    serial: str                 # hex, as in the deny list
    role: str                   # controller, agent, admin, viewer; "ca" for the CA; "" if unknown
    name: str
    not_after: str              # ISO 8601, UTC; "" if unknown
    file: str = ""              # where the certificate was written
    issued_at: str = ""
    revoked: bool = False
    revoked_at: str = ""
    reason: str = ""

    def status(self, now: datetime.datetime | None = None) -> str:
        if self.revoked:
            return "revoked"
        if self.not_after and datetime.datetime.fromisoformat(self.not_after) < (now or _now()):
            return "expired"
        return "valid"


@dataclass(frozen=True)
class Index:
    path: Path
    entries: list[IndexEntry]
    rebuilt: bool = False       # no index file: made from the certificate files and the deny list

    def find(self, serial: int) -> IndexEntry | None:
        return next((e for e in self.entries if int(e.serial, 16) == serial), None)


def _entry_of(cert: x509.Certificate, file: Path | None, role: str = "", name: str = "",
              fresh: bool = True) -> IndexEntry:
    if not role:
        try:
            identity = identity_of_certificate(cert)
            role, name = identity.role.value, identity.name
        except NotAnIdentity:
            pass
    # issued now, or (rebuilding) when it became valid, which is 5 minutes before it was signed
    issued = _now() if fresh else cert.not_valid_before_utc
    return IndexEntry(f"{cert.serial_number:x}", role, name, cert.not_valid_after_utc.isoformat(),
                      str(file) if file else "", issued.isoformat(timespec="seconds"))


@contextmanager
def _index_lock(directory: Path) -> Iterator[None]:
    """One writer of the index (and of what it records) at a time: two `pki` commands at once
    must not lose each other's entries."""
    if not directory.is_dir():
        raise PkiError(f"no CA in {directory} (no such directory); run 'gleanctl pki init {directory}' on the "
                       "machine that keeps the CA key")
    with open(directory / ".index.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def load_index(directory: Path) -> Index:
    """The CA's index; without one (a CA made before the index existed), what can be told from
    the certificates in `directory` signed by its CA and from its deny list."""
    path = directory / INDEX
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return _rebuild_index(directory)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise PkiError(f"index {path} cannot be read ({exc}); it is rebuilt from the certificates in {directory} "
                       "if you move it away") from None
    try:
        entries = [IndexEntry(**row) for row in data["certificates"]]
    except (KeyError, TypeError) as exc:
        raise PkiError(f"index {path} is not a Gleaner CA index ({exc}); it is rebuilt from the certificates in "
                       f"{directory} if you move it away") from None
    return Index(path, entries)


def _rebuild_index(directory: Path) -> Index:
    entries: list[IndexEntry] = []
    try:
        ca_cert = x509.load_pem_x509_certificate((directory / "ca.pem").read_bytes())
        entries.append(_entry_of(ca_cert, directory / "ca.pem", CA_ROLE, "ca", fresh=False))
    except (OSError, ValueError):
        ca_cert = None
    for path in sorted(directory.glob("*.pem")) if ca_cert else ():
        if path.name == "ca.pem":
            continue
        try:
            cert = x509.load_pem_x509_certificate(path.read_bytes())
            cert.verify_directly_issued_by(ca_cert)
        except (OSError, ValueError, TypeError, InvalidSignature):
            continue   # not a certificate, or another CA's
        entries.append(_entry_of(cert, path, fresh=False))
    for serial in sorted(load_deny_list(directory / DENY_LIST)):
        entry = next((e for e in entries if int(e.serial, 16) == serial), None)
        if entry is None:
            entry = IndexEntry(f"{serial:x}", "", "", "")
            entries.append(entry)
        entry.revoked = True
    entries.sort(key=lambda e: e.issued_at)
    return Index(directory / INDEX, entries, rebuilt=True)


def _save_index(index: Index) -> None:
    """Write the whole index to a temporary file, flush it to disk, and rename it over the old
    one: a crash leaves either the old index or the new, never half of one."""
    text = json.dumps({"format": INDEX_FORMAT, "certificates": [asdict(e) for e in index.entries]}, indent=1)
    temporary = index.path.with_name(f".{index.path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, index.path)
    finally:
        temporary.unlink(missing_ok=True)
    directory = os.open(index.path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)     # the rename itself survives a power cut
    finally:
        os.close(directory)


def _record(directory: Path, entry: IndexEntry) -> None:
    """Add one issued certificate to the index (the caller holds _index_lock)."""
    index = load_index(directory)
    # a rebuilt index already holds the file just written: the fresh entry takes its place
    index.entries[:] = [e for e in index.entries if e.serial != entry.serial] + [entry]
    _save_index(index)


def check_hosts(hosts: tuple[str, ...]) -> tuple[str, ...]:
    """Extra server names; those under .gleaner are refused: they are the identities' own
    (controller.gleaner, NODE.agent.gleaner), and one more would let a certificate serve as
    another identity (an agent's as the controller, or as another node)."""
    for host in hosts:
        label = host.lower().rstrip(".")
        if label == TRUST_DOMAIN or label.endswith(f".{TRUST_DOMAIN}"):
            raise PkiError(f"--host {host[:80]!r} is reserved: names under .{TRUST_DOMAIN} are given by the role "
                           "and name (controller.gleaner, NODE.agent.gleaner); name the host's real DNS name or "
                           "address instead")
    return hosts


def _alt_names(role: Role, name: str, hosts: tuple[str, ...], serial: int) -> list[x509.GeneralName]:
    sans: list[x509.GeneralName] = [x509.UniformResourceIdentifier(spiffe_uri(role, name))]
    if role in SERVING_ROLES:
        dns = [server_name_for(role, name), pinned_server_name(role, name, serial)]
        ips = []
        for host in hosts:
            try:
                ips.append(ipaddress.ip_address(host))
            except ValueError:
                dns.append(host)
        sans += [x509.DNSName(d) for d in dict.fromkeys(dns)] + [x509.IPAddress(ip) for ip in dict.fromkeys(ips)]
    return sans


def sign(directory: Path, role: Role, name: str, public_key, hosts: tuple[str, ...] = (),
         days: int | None = None) -> x509.Certificate:
    """A certificate for (role, name) on `public_key`, signed by the CA in `directory`."""
    check_hosts(hosts)
    ca_cert, ca_key = _load_ca(directory)
    days = DEFAULT_DAYS[role] if days is None else days
    if not 0 < days <= 3650:
        raise PkiError(f"validity must be 1..3650 days, not {days}")
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    if role in SERVING_ROLES:  # they serve, and dial out too (agents report, the controller calls agents)
        usages.insert(0, ExtendedKeyUsageOID.SERVER_AUTH)
    now = _now()
    not_after = min(now + datetime.timedelta(days=days), ca_cert.not_valid_after_utc)
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
                         x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, role.value),
                         x509.NameAttribute(NameOID.COMMON_NAME, name)])
    serial = x509.random_serial_number()
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_cert.subject).public_key(public_key)
            .serial_number(serial)
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(_alt_names(role, name, hosts, serial)), critical=False)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .sign(ca_key, hashes.SHA256()))


def issue(directory: Path, role: Role, name: str, hosts: tuple[str, ...] = (), days: int | None = None,
          out_dir: Path | None = None, replace: bool = False) -> TlsFiles:
    """A new key and certificate for (role, name), written as ROLE-NAME.key/.pem (with ca.pem
    beside them when out_dir is elsewhere) and recorded in the index. Existing files are refused
    unless `replace` (renew, and the lab's own certificates, replace on purpose)."""
    out = out_dir or directory
    files = files_for(out, role, name)
    if not replace:
        _refuse_existing(files.cert, files.key)
    key = ec.generate_private_key(ec.SECP256R1())
    with _index_lock(directory):
        cert = sign(directory, role, name, key.public_key(), hosts, days)
        out.mkdir(parents=True, exist_ok=True)
        out.chmod(0o700)
        _write_private(files.key, _key_pem(key), replace)
        _write_certificate(files.cert, cert, replace, also_remove=files.key)
        _record_or_undo(directory, _entry_of(cert, files.cert), files.cert, files.key)
    if out != directory:
        files.ca.write_bytes((directory / "ca.pem").read_bytes())
    return files


RENEW_HINT = ("to replace a certificate issued here use 'gleanctl pki renew'; otherwise move the file away "
              "first (and revoke its serial, from 'gleanctl pki show', if its key may have leaked)")
SIGN_HINT = ("if you mean to replace it, move it away first, sign again, and revoke the old serial (from "
             "'gleanctl pki show') once the new certificate is in place")


def _refuse_existing(*paths: Path, hint: str = RENEW_HINT) -> None:
    for path in paths:
        if path.exists():
            raise PkiError(f"{path} already exists; it is not overwritten and nothing was signed: {hint}")


def _write_certificate(path: Path, cert: x509.Certificate, replace: bool, also_remove: Path | None = None) -> None:
    try:
        _write_private(path, _cert_pem(cert), replace)
    except PkiError:
        if also_remove is not None:
            also_remove.unlink(missing_ok=True)
        raise
    path.chmod(0o644)   # a certificate is public; only keys are private


def _record_or_undo(directory: Path, entry: IndexEntry, *written: Path) -> None:
    """Record a new certificate; if the index cannot be written, the files just written are
    removed: no certificate leaves the CA unrecorded."""
    try:
        _record(directory, entry)
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        raise


def request(out_dir: Path, role: Role, name: str) -> Path:
    """A key (kept here) and a certificate signing request to carry to the CA's machine. An
    existing key is refused: it may be the live one (renewing on a node makes the new key in a
    directory of its own, see docs/security.md)."""
    files = files_for(out_dir, role, name)
    path = files.cert.with_suffix(".csr")
    for existing in (files.key, path):
        if existing.exists():
            raise PkiError(f"{existing} already exists; it is not overwritten (it may be the key in use). Make the "
                           f"request in a directory of its own, e.g. {out_dir / 'next'}")
    out_dir.mkdir(parents=True, exist_ok=True)
    out_dir.chmod(0o700)
    key = ec.generate_private_key(ec.SECP256R1())
    csr = (x509.CertificateSigningRequestBuilder()
           .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
           .add_extension(x509.SubjectAlternativeName([x509.UniformResourceIdentifier(spiffe_uri(role, name))]),
                          critical=False)
           .sign(key, hashes.SHA256()))
    _write_private(files.key, _key_pem(key), replace=False)
    path.write_bytes(csr.public_bytes(serialization.Encoding.PEM))
    return path


def identity_of_request(csr_path: Path) -> tuple[Role, str, x509.CertificateSigningRequest]:
    """The identity a request asks for: its one spiffe://gleaner/ROLE/NAME name (and a common
    name, if any, that agrees with it); a request that is unreadable, unsigned or ambiguous is
    refused, naming the file."""
    try:
        csr = x509.load_pem_x509_csr(csr_path.read_bytes())
    except OSError as exc:
        raise PkiError(f"{csr_path}: cannot be read ({exc.strerror})") from None
    except ValueError:
        raise PkiError(f"{csr_path}: not a PEM certificate signing request (make one with "
                       "'gleanctl pki request')") from None
    if not csr.is_signature_valid:
        raise PkiError(f"{csr_path}: the request's signature is invalid")
    try:
        sans = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        uris = [u for u in sans.get_values_for_type(x509.UniformResourceIdentifier)
                if u.startswith(f"spiffe://{TRUST_DOMAIN}/")]
    except x509.ExtensionNotFound:
        uris = []
    if len(uris) != 1:
        raise PkiError(f"{csr_path}: the request names {len(uris)} Gleaner identities (spiffe://{TRUST_DOMAIN}/ROLE/"
                       "NAME); it must name exactly one")
    try:
        role, name = parse_uri(uris[0])
    except NotAnIdentity as exc:
        raise PkiError(f"{csr_path}: {exc}") from None
    common = [a.value for a in csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    if any(value != name for value in common):
        raise PkiError(f"{csr_path}: the request's common name {common[0][:80]!r} differs from the name in its "
                       f"identity {uris[0]!r}")
    return role, name, csr


def sign_request(directory: Path, csr_path: Path, role: Role | None = None, name: str | None = None,
                 hosts: tuple[str, ...] = (), days: int | None = None) -> Path:
    """Sign a request for the identity it asks for, written as ROLE-NAME.pem beside it and
    recorded in the index. A role or name the operator gives must agree with the request's;
    an existing certificate file is refused."""
    asked_role, asked_name, csr = identity_of_request(csr_path)
    if (role is not None and role is not asked_role) or (name is not None and name != asked_name):
        named = f"{role.value if role else asked_role.value}/{name if name is not None else asked_name}"
        raise PkiError(f"{csr_path} asks for {asked_role.value}/{asked_name}, but you named {named}: refused, "
                       "nothing signed. A request is signed only for the identity it asks for (leave ROLE and "
                       f"NAME out, or give its own); if {named} is what you meant, its holder makes a request with "
                       f"'gleanctl pki request DIR {named.replace('/', ' ')}'")
    out = csr_path.parent / f"{stem(asked_role, asked_name)}.pem"
    _refuse_existing(out, hint=SIGN_HINT)
    with _index_lock(directory):
        cert = sign(directory, asked_role, asked_name, csr.public_key(), hosts, days)
        _write_certificate(out, cert, replace=False)
        _record_or_undo(directory, _entry_of(cert, out), out)
    return out


def describe(cert_path: Path) -> dict:
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    identity = identity_of_certificate(cert)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return {"identity": identity.uri, "role": identity.role.value, "name": identity.name,
            "serial": f"{cert.serial_number:x}", "not_before": cert.not_valid_before_utc.isoformat(),
            "not_after": cert.not_valid_after_utc.isoformat(),
            "dns": sans.get_values_for_type(x509.DNSName),
            "ip": [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)]}


def renew(directory: Path, cert_path: Path, days: int | None = None) -> TlsFiles:
    """Reissue a certificate: same identity and names, a new key, a fresh validity. It runs where
    the CA key is; on a node, a new key and request are made there instead (request, then sign)."""
    if not (directory / "ca.key").exists():
        raise PkiError(f"no CA key in {directory}: renew runs on the CA's machine. On a node, make a new key and "
                       "request there with 'gleanctl pki request', sign it on the CA's machine with 'gleanctl pki "
                       "sign', and put both in place (docs/security.md: renewing on a node)")
    info = describe(cert_path)
    role, name = Role(info["role"]), info["name"]
    # names under .gleaner come with the role (and the serial); the rest are the --host names
    hosts = tuple(h for h in info["dns"] + info["ip"] if not h.lower().endswith(f".{TRUST_DOMAIN}")) \
        if role in SERVING_ROLES else ()
    return issue(directory, role, name, hosts, days, out_dir=cert_path.parent, replace=True)


def revoke(directory: Path, target: str, reason: str = "") -> int:
    """Add a certificate (a path, or a serial in hex) to the deny list and mark it revoked in the
    index; returns the serial."""
    path = Path(target)
    cert = None
    if path.is_file():
        try:
            cert = x509.load_pem_x509_certificate(path.read_bytes())
        except ValueError:
            raise PkiError(f"{path} is not a PEM certificate; name a certificate file or a serial in hex") from None
        serial = cert.serial_number
    else:
        try:
            serial = int(target, 16)
        except ValueError:
            raise PkiError(f"{target[:80]!r} is neither a certificate file nor a serial number in hex") from None
    deny = directory / DENY_LIST
    with _index_lock(directory):
        if serial not in load_deny_list(deny):
            with open(deny, "a") as handle:
                comment = f"  # {reason}" if reason else ""
                handle.write(f"{serial:x}{comment}\n")
        index = load_index(directory)
        entry = index.find(serial)
        if entry is None:   # issued before the index, or elsewhere: recorded with what is known
            entry = _entry_of(cert, path, fresh=False) if cert is not None else IndexEntry(f"{serial:x}", "", "", "")
            index.entries.append(entry)
        if not entry.revoked or not entry.revoked_at:
            entry.revoked, entry.revoked_at, entry.reason = True, _now().isoformat(), reason
            _save_index(index)
    return serial


def load_deny_list(path: Path | None) -> frozenset[int]:
    """Revoked serials; a missing file is an empty list, an unreadable file or a bad line a
    DenyListError naming the file and line."""
    if path is None or not path.exists():
        return frozenset()
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DenyListError(path, 0, f"cannot be read ({exc})") from None
    serials = set()
    for number, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            serials.add(int(text, 16))
        except ValueError:
            raise DenyListError(path, number, f"{text[:40]!r} is not a certificate serial number in hex "
                                              "(one a line; '#' starts a comment)") from None
    return frozenset(serials)


def expires_within(cert_path: Path, days: float) -> bool:
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    return cert.not_valid_after_utc - _now() < datetime.timedelta(days=days)


def identity_in(files: TlsFiles) -> Identity:
    try:
        return identity_of_certificate(x509.load_pem_x509_certificate(files.cert.read_bytes()))
    except (OSError, ValueError) as exc:
        raise PkiError(f"{files.cert}: {exc}") from None


def check_identity(files: TlsFiles, role: Role, name: str | None = None) -> Identity:
    """The identity in a process's own certificate, which must be of `role` (and `name`)."""
    identity = identity_in(files)
    if identity.role is not role or (name is not None and identity.name != name):
        want = f"{role.value}/{name}" if name is not None else f"a {role.value} identity"
        raise PkiError(f"{files.cert} names {identity}, but this process is {want}; issue one with "
                       f"'gleanctl pki issue DIR {role.value} {name or 'NAME'}'")
    return identity


def check_server(files: TlsFiles | None, deny_list: Path | None, role: Role, name: str | None = None) -> None:
    """What a server checks before it starts: its certificate names it, and its deny list reads
    (a server that cannot tell whom it revoked must not serve)."""
    if files is not None:
        check_identity(files, role, name)
        load_deny_list(deny_list)


LAB_PEOPLE = {Role.ADMIN: "lab-admin", Role.VIEWER: "lab-viewer"}
LAB_CONTROLLER = "main"


@dataclass(frozen=True)
class LabPki:
    directory: Path
    controller: TlsFiles
    admin: TlsFiles
    viewer: TlsFiles
    agents: dict[str, TlsFiles]
    hosts: tuple[str, ...] = ()

    @property
    def deny_list(self) -> Path:
        return self.directory / DENY_LIST

    def agent(self, node: str) -> TlsFiles:
        """The agent certificate of `node`, issued now if the lab has none yet."""
        if node not in self.agents:
            files = files_for(self.directory, Role.AGENT, node)
            if not files.cert.exists():
                files = issue(self.directory, Role.AGENT, node, self.hosts, replace=True)
            self.agents[node] = files
        return self.agents[node]


def ensure_lab_pki(directory: Path, nodes: tuple[str, ...] = (), hosts: tuple[str, ...] = ()) -> LabPki:
    """A lab CA with a controller, an admin, a viewer and one agent per node; made once, and
    what is missing or expires within a week made again."""
    if not (directory / "ca.pem").exists() or expires_within(directory / "ca.pem", 7):
        for old in ("ca.pem", "ca.key"):
            (directory / old).unlink(missing_ok=True)
        init_ca(directory)
        for old in directory.glob("*-*.pem"):
            old.unlink()
    hosts = tuple(dict.fromkeys(("localhost", "127.0.0.1", "::1", *hosts)))
    wanted = [(Role.CONTROLLER, LAB_CONTROLLER), (Role.ADMIN, LAB_PEOPLE[Role.ADMIN]),
              (Role.VIEWER, LAB_PEOPLE[Role.VIEWER])] + [(Role.AGENT, node) for node in nodes]
    made = {}
    for role, name in wanted:
        files = files_for(directory, role, name)
        if not (files.cert.exists() and files.key.exists()) or expires_within(files.cert, 7):
            files = issue(directory, role, name, hosts if role in SERVING_ROLES else (), replace=True)
        made[(role, name)] = files
    return LabPki(directory, made[(Role.CONTROLLER, LAB_CONTROLLER)], made[(Role.ADMIN, LAB_PEOPLE[Role.ADMIN])],
                  made[(Role.VIEWER, LAB_PEOPLE[Role.VIEWER])],
                  {name: made[(Role.AGENT, name)] for role, name in wanted if role is Role.AGENT}, hosts)
