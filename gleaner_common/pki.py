"""Certificates per identity: a CA, and certificates for the controller, each agent (bound to
its node), and each admin and viewer. Keys are written 0600 and never leave the machine that
made them; with `request` and `sign` not even an agent's key leaves its node, and the CA key
stays on the admin's machine.

Layout of a PKI directory (0700):
    ca.pem, ca.key                  the CA
    ROLE-NAME.pem, ROLE-NAME.key    one identity (agent-node1, controller-main, admin-alice, ...)
    revoked.txt                     the deny list: serial numbers (hex), one a line, '#' comments;
                                    servers read it at start and again on SIGHUP
"""
from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .identity import TRUST_DOMAIN, Identity, Role, identity_of_certificate, server_name_for, spiffe_uri

CA_DAYS = 3650
# Short by default: services renew every few months, people every month.
DEFAULT_DAYS = {Role.CONTROLLER: 90, Role.AGENT: 90, Role.ADMIN: 30, Role.VIEWER: 30}
SERVING_ROLES = (Role.CONTROLLER, Role.AGENT)
DENY_LIST = "revoked.txt"
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


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _write_private(path: Path, data: bytes) -> None:
    """Write a file only root can read, never world-readable even for a moment."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(path, 0o600)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def stem(role: Role, name: str) -> str:
    return f"{role.value}-{name}"


def files_for(directory: Path, role: Role, name: str) -> TlsFiles:
    base = directory / stem(role, name)
    return TlsFiles(directory / "ca.pem", base.with_suffix(".pem"), base.with_suffix(".key"))


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
    return ca_pem


def _load_ca(directory: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    try:
        cert = x509.load_pem_x509_certificate((directory / "ca.pem").read_bytes())
        key = serialization.load_pem_private_key((directory / "ca.key").read_bytes(), password=None)
    except FileNotFoundError as exc:
        raise PkiError(f"no CA in {directory} ({exc.filename} is missing); run 'gleanctl pki init {directory}' "
                       "on the machine that keeps the CA key") from None
    return cert, key  # type: ignore[return-value]


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


def _alt_names(role: Role, name: str, hosts: tuple[str, ...]) -> list[x509.GeneralName]:
    sans: list[x509.GeneralName] = [x509.UniformResourceIdentifier(spiffe_uri(role, name))]
    if role in SERVING_ROLES:
        dns = [server_name_for(role, name)]
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
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_cert.subject).public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(_alt_names(role, name, hosts)), critical=False)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .sign(ca_key, hashes.SHA256()))


def issue(directory: Path, role: Role, name: str, hosts: tuple[str, ...] = (), days: int | None = None,
          out_dir: Path | None = None) -> TlsFiles:
    """A new key and certificate for (role, name), written as ROLE-NAME.key/.pem (with ca.pem
    beside them when out_dir is elsewhere)."""
    key = ec.generate_private_key(ec.SECP256R1())
    cert = sign(directory, role, name, key.public_key(), hosts, days)
    out = out_dir or directory
    out.mkdir(parents=True, exist_ok=True)
    out.chmod(0o700)
    files = files_for(out, role, name)
    _write_private(files.key, _key_pem(key))
    files.cert.write_bytes(_cert_pem(cert))
    if out != directory:
        files.ca.write_bytes((directory / "ca.pem").read_bytes())
    return files


def request(out_dir: Path, role: Role, name: str) -> Path:
    """A key (kept here) and a certificate signing request to carry to the CA's machine."""
    out_dir.mkdir(parents=True, exist_ok=True)
    out_dir.chmod(0o700)
    key = ec.generate_private_key(ec.SECP256R1())
    csr = (x509.CertificateSigningRequestBuilder()
           .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
           .add_extension(x509.SubjectAlternativeName([x509.UniformResourceIdentifier(spiffe_uri(role, name))]),
                          critical=False)
           .sign(key, hashes.SHA256()))
    files = files_for(out_dir, role, name)
    _write_private(files.key, _key_pem(key))
    path = files.cert.with_suffix(".csr")
    path.write_bytes(csr.public_bytes(serialization.Encoding.PEM))
    return path


def sign_request(directory: Path, csr_path: Path, role: Role, name: str, hosts: tuple[str, ...] = (),
                 days: int | None = None) -> Path:
    """Sign a request for the identity the admin names (not the one the request claims)."""
    csr = x509.load_pem_x509_csr(csr_path.read_bytes())
    if not csr.is_signature_valid:
        raise PkiError(f"{csr_path}: the request's signature is invalid")
    cert = sign(directory, role, name, csr.public_key(), hosts, days)
    out = csr_path.with_suffix(".pem")
    out.write_bytes(_cert_pem(cert))
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
    hosts = tuple(h for h in info["dns"] + info["ip"] if h != server_name_for(role, name)) \
        if role in SERVING_ROLES else ()
    return issue(directory, role, name, hosts, days, out_dir=cert_path.parent)


def revoke(directory: Path, target: str, reason: str = "") -> int:
    """Add a certificate (a path, or a serial in hex) to the deny list; returns the serial."""
    path = Path(target)
    serial = x509.load_pem_x509_certificate(path.read_bytes()).serial_number if path.is_file() else int(target, 16)
    deny = directory / DENY_LIST
    if serial not in load_deny_list(deny):
        with open(deny, "a") as handle:
            comment = f"  # {reason}" if reason else ""
            handle.write(f"{serial:x}{comment}\n")
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
                files = issue(self.directory, Role.AGENT, node, self.hosts)
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
            files = issue(directory, role, name, hosts if role in SERVING_ROLES else ())
        made[(role, name)] = files
    return LabPki(directory, made[(Role.CONTROLLER, LAB_CONTROLLER)], made[(Role.ADMIN, LAB_PEOPLE[Role.ADMIN])],
                  made[(Role.VIEWER, LAB_PEOPLE[Role.VIEWER])],
                  {name: made[(Role.AGENT, name)] for role, name in wanted if role is Role.AGENT}, hosts)
