"""Certificates for mutual TLS: a lab CA that signs server and client certificates.

Production deployments bring their own CA; the lab mode (the all-in-one pool, tests, the
Vagrant lab) makes one here. Keys are written 0600.

    python -m nodeagent.pki DIR [--host NAME ...]
"""
from __future__ import annotations

import argparse
import datetime
import ipaddress
import socket
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 825


@dataclass(frozen=True)
class TlsFiles:
    ca: Path
    cert: Path
    key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Gleaner lab"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))


def _issue(subject: str, issuer_key, issuer_name: x509.Name | None, *, ca: bool,
           sans: list[x509.GeneralName] | None = None, usage=None):
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(_name(subject))
               .issuer_name(issuer_name or _name(subject)).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    if usage:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    cert = builder.sign(issuer_key or key, hashes.SHA256())
    return key, cert


def ensure_lab_pki(directory: Path, hosts: list[str] | None = None) -> dict[str, TlsFiles]:
    """Create (once) a CA with a server and a client certificate; returns 'server' and 'client'."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    ca_pem, ca_key_pem = directory / "ca.pem", directory / "ca.key"
    files = {role: TlsFiles(ca_pem, directory / f"{role}.pem", directory / f"{role}.key")
             for role in ("server", "client")}
    marker = directory / "layout-2"  # server certificates that can also dial out
    if all(f.cert.exists() and f.key.exists() for f in files.values()) and ca_pem.exists() and marker.exists():
        return files
    ca_key, ca_cert = _issue("Gleaner lab CA", None, None, ca=True)
    _write_key(ca_key_pem, ca_key)
    ca_pem.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    names = ["localhost", socket.gethostname(), *(hosts or [])]
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dict.fromkeys(names)]
    sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in ("127.0.0.1", "::1")]
    # The server certificate also dials out: agents report to the controller and the
    # controller calls agents, each with the certificate it serves with.
    both = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    for role, usage, role_sans in (("server", both, sans),
                                   ("client", [ExtendedKeyUsageOID.CLIENT_AUTH], None)):
        key, cert = _issue(f"gleaner-{role}", ca_key, ca_cert.subject, ca=False, sans=role_sans, usage=usage)
        _write_key(files[role].key, key)
        files[role].cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    marker.write_text("server certificates carry serverAuth and clientAuth\n")
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description="Create a lab CA with server and client certificates.")
    parser.add_argument("directory", type=Path)
    parser.add_argument("--host", action="append", default=[], help="extra server name (repeatable)")
    args = parser.parse_args()
    files = ensure_lab_pki(args.directory, args.host)
    for role, f in files.items():
        print(f"{role}: ca={f.ca} cert={f.cert} key={f.key}")


if __name__ == "__main__":
    main()
