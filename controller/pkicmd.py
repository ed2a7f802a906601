"""`gleanctl pki`: the CA and per-identity certificates, on the admin's machine.

    gleanctl pki init DIR                                   a new CA (ca.pem, ca.key) in DIR
    gleanctl pki issue DIR ROLE NAME [PERSON] [--host H ...] [--days N] [--out OUTDIR]
    gleanctl pki request OUTDIR ROLE NAME [PERSON]          on a node: a key and a signing request
    gleanctl pki sign DIR CSR [ROLE NAME [PERSON]] [--host H ...]  on the CA's machine: sign that request
    gleanctl pki renew DIR CERT [--days N]                  reissue: same identity, new key and validity
    gleanctl pki revoke DIR CERT|SERIAL [--reason TEXT]     add to DIR/revoked.txt; servers reload on SIGHUP
    gleanctl pki list DIR                                   what the CA issued (DIR/index.json), revoked or not
    gleanctl pki show CERT                                  identity, serial, validity, names

ROLE is controller, agent (NAME = the node id), admin or viewer (NAME = the person), or
tenant-admin (NAME = the tenant, then PERSON: `pki issue DIR tenant-admin acme bob`). `sign` signs
for the identity the request asks for: a ROLE or NAME given must agree with it. No command
overwrites a key or certificate (`renew` replaces one on purpose).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from gleaner_common import pki
from gleaner_common.identity import Role, split_tenant_name, tenant_admin_name

ROLES = [r.value for r in Role]
NAME_HELP = "the node id for an agent; the person for admin and viewer; the tenant for a tenant-admin"
PERSON_HELP = "a tenant-admin's person (after NAME, its tenant); no other role takes one"


def add_parser(sub: argparse._SubParsersAction, parents: list[argparse.ArgumentParser] | None = None) -> None:
    """`parents`: gleanctl's flags that go anywhere (-o, --json), taken by every pki action too."""
    parents = parents or []
    parser = sub.add_parser("pki", help="create a CA and certificates per identity (controller, agent, admin, viewer, "
                                        "tenant-admin)",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, parents=parents)
    actions = parser.add_subparsers(dest="pki_action", required=True)

    def add(name: str, **kw) -> argparse.ArgumentParser:   # every action takes the flags too
        return actions.add_parser(name, parents=parents, **kw)
    init = add("init", help="a new CA")
    init.add_argument("dir", type=Path)
    init.add_argument("--days", type=int, default=pki.CA_DAYS)
    for name, text in (("issue", "a key and certificate for one identity"),
                       ("sign", "sign a request made on a node with 'pki request'")):
        action = add(name, help=text)
        action.add_argument("dir", type=Path, help="the CA's directory")
        if name == "sign":
            action.add_argument("csr", type=Path)
            action.add_argument("role", choices=ROLES, nargs="?",
                                help="optional: the request's own role; a different one is refused")
            action.add_argument("name", nargs="?", help="optional: the request's own name; a different one is refused")
        else:
            action.add_argument("role", choices=ROLES)
            action.add_argument("name", help=NAME_HELP)
        action.add_argument("person", nargs="?", help=PERSON_HELP)
        action.add_argument("--host", action="append", default=[],
                            help="a DNS name or IP address the server is reached at (controller, agent)")
        action.add_argument("--days", type=int, help="validity (default: 90 for services, 30 for people)")
        if name == "issue":
            action.add_argument("--out", type=Path, help="write the files here (with ca.pem) instead of DIR")
    request = add("request", help="a key and a signing request, made where the key will live")
    request.add_argument("out", type=Path)
    request.add_argument("role", choices=ROLES)
    request.add_argument("name", help=NAME_HELP)
    request.add_argument("person", nargs="?", help=PERSON_HELP)
    renew = add("renew", help="reissue a certificate with a new key and validity")
    renew.add_argument("dir", type=Path)
    renew.add_argument("cert", type=Path)
    renew.add_argument("--days", type=int)
    revoke = add("revoke", help="put a certificate on the deny list")
    revoke.add_argument("dir", type=Path)
    revoke.add_argument("target", help="a certificate file or its serial number in hex")
    revoke.add_argument("--reason", default="")
    listing = add("list", help="what the CA issued: serial, role, name, not-after, revoked")
    listing.add_argument("dir", type=Path, help="the CA's directory")
    show = add("show", help="what a certificate says")
    show.add_argument("cert", type=Path)


def run(args: argparse.Namespace) -> tuple[dict, str]:
    """Carry out one pki action: (data for --json, text for people)."""
    action = args.pki_action
    if action == "init":
        path = pki.init_ca(args.dir, args.days)
        return {"ca": str(path)}, f"made a CA in {args.dir}; keep {args.dir / 'ca.key'} off the nodes"
    if action == "issue":
        files = pki.issue(args.dir, Role(args.role), identity_name(args), tuple(args.host), args.days, args.out)
        return _files(files), f"issued {pki.describe(files.cert)['identity']}: {files.cert} and {files.key}"
    if action == "request":
        name = identity_name(args)
        csr = pki.request(args.out, Role(args.role), name)
        return {"csr": str(csr)}, (f"key and request in {args.out}; sign {csr.name} on the CA's machine with "
                                   f"'gleanctl pki sign DIR {csr.name} {args.role} {name.replace('/', ' ')}'")
    if action == "sign":
        cert = pki.sign_request(args.dir, args.csr, Role(args.role) if args.role else None,
                                identity_name(args) if args.name else None, tuple(args.host), args.days)
        info = pki.describe(cert)
        return {"cert": str(cert), "serial": info["serial"]}, (
            f"signed {info['identity']} (serial {info['serial']}, until {info['not_after']}): {cert}")
    if action == "list":
        return _listing(args.dir)
    if action == "renew":
        files = pki.renew(args.dir, args.cert, args.days)
        info = pki.describe(files.cert)
        return _files(files), f"renewed {info['identity']} until {info['not_after']}: {files.cert}"
    if action == "revoke":
        serial = pki.revoke(args.dir, args.target, args.reason)
        return {"serial": f"{serial:x}", "deny_list": str(args.dir / pki.DENY_LIST)}, (
            f"revoked serial {serial:x} in {args.dir / pki.DENY_LIST} (and marked in {args.dir / pki.INDEX}); copy "
            "it to every host's [tls] deny_list and send the servers SIGHUP (clients re-read it when it changes)")
    info = pki.describe(args.cert)
    return info, "\n".join(f"{key:<10} {json.dumps(value) if isinstance(value, list) else value}"
                           for key, value in info.items())


def identity_name(args: argparse.Namespace) -> str:
    """The identity's name from NAME [PERSON]: TENANT/PERSON for a tenant-admin (both needed, each
    checked), NAME alone for every other role (a PERSON there is refused, naming it)."""
    if args.role == Role.TENANT_ADMIN.value:
        if args.person is None:   # TENANT/PERSON in one word is taken too (it is what `pki show` prints)
            split_tenant_name(args.name)
            return args.name
        return tenant_admin_name(args.name, args.person)
    if args.person is not None:
        raise pki.PkiError(f"{args.role} {args.name} {args.person}: only a tenant-admin takes a PERSON after its NAME "
                           f"(its tenant); {args.role} is named by NAME alone")
    return args.name


def _files(files: pki.TlsFiles) -> dict:
    return {"ca": str(files.ca), "cert": str(files.cert), "key": str(files.key)}


def _listing(directory: Path) -> tuple[dict, str]:
    """The index as a table (oldest first), and as data for --json."""
    index = pki.load_index(directory)
    rows = [dict(vars(e), status=e.status()) for e in index.entries]
    data = {"index": str(index.path), "rebuilt": index.rebuilt, "certificates": rows}
    header = ["SERIAL", "ROLE", "NAME", "NOT AFTER", "STATUS", "FILE"]
    cells = [[r["serial"], r["role"] or "?", r["name"] or "?", r["not_after"][:19] or "?",
              r["status"] + (f" ({r['reason']})" if r["reason"] else ""), r["file"]] for r in rows]
    text = _table(cells, header)
    if index.rebuilt:
        text += (f"\n(no {index.path.name} yet: this is what the certificates in {directory} and its deny list "
                 "tell; the next issue, sign or revoke writes the index)")
    return data, text


def _table(rows: list[list[str]], header: list[str]) -> str:
    cells = [header] + rows
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)
