"""gleanctl: drive a Gleaner pool from the command line.

    gleanctl [--controller HOST:PORT] [--config FILE] [--json] COMMAND ...

Exit codes: 0 done; 1 the controller said no or not yet (a rejected or failed request, one still
pending when --timeout ran out, or a release whose stop is not confirmed within it); 2 bad usage or configuration; 3 the controller cannot be reached; 4 the
input is invalid (checked here by the controller's own rules before any call, naming the field)
or the controller refused it (invalid argument, unknown lease).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import grpc
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.json_format import MessageToDict

from gleaner_common import ids
from gleaner_common.config import ConfigError, parse_sections, read_toml
from gleaner_common.identity import Role
from gleaner_common.pki import PkiError, TlsFiles
from gleaner_common.rpc import channel_to
from protos import controller_pb2, controller_pb2_grpc
from protos.words import LEASE_STATE, VM_ROLE, from_wire

from . import checks, pkicmd
from .checks import parse_backfill_setting

DEFAULT_CONFIG = Path("/etc/gleaner/gleanctl.toml")
EXIT_REFUSED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_INVALID = 1, 2, 3, 4


class UsageError(Exception):
    pass


@dataclass(frozen=True)
class Target:
    controller: str = "127.0.0.1:7450"
    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    deny_list: Path | None = None    # the controller's serial in it: refused (see rpc.RevocationCheckedChannel)
    insecure: bool = False


_SCHEMA = {"gleanctl": {"controller": ("controller", str)}}


def load_target(args: argparse.Namespace) -> Target:
    """Flags override the config file; the file is --config, else /etc/gleaner/gleanctl.toml if present."""
    values: dict[str, Any] = {}
    path = args.config or (DEFAULT_CONFIG if DEFAULT_CONFIG.exists() else None)
    if path is not None:
        settings, tls = parse_sections(read_toml(path), _SCHEMA, str(path))
        values.update(settings, **tls)
    for key in ("controller", "ca", "cert", "key"):
        if getattr(args, key):
            values[key] = getattr(args, key)
    if args.insecure:
        values["insecure"] = True
    target = Target(**values)
    if not target.insecure and None in (target.ca, target.cert, target.key):
        raise UsageError("mutual TLS needs --ca, --cert and --key (or a config file with [tls] ca, cert, key); "
                         "--insecure only works against a controller listening without TLS on a unix socket")
    return target


def check_arguments(args: argparse.Namespace) -> None:
    """The controller's own rules for what this command sends (gleaner_common.ids and the
    bounds in checks), applied before any call: InvalidField names the field."""
    if args.command == "request":
        checks.request(args.vcpus, args.memory, args.image, args.owner, args.request_id or "req-new")
    elif args.command == "release":
        ids.lease_id(args.lease_id)
    elif args.command == "cancel":
        ids.request_id(args.request_id)
    elif args.command == "reserve":
        action, node = reserve_action(args)
        if action == "settings":
            reserve_changes(args.rest)
        elif node is not None:
            checks.reserve(node, args.vcpus, args.memory, args.whole_node)
        elif action == "hint":
            checks.hint(*hint_arguments(args))
        elif args.label:
            checks.hint_label(args.label)


def stub_for(target: Target) -> controller_pb2_grpc.ControllerStub:
    """A stub whose channel reaches only a server with the controller's certificate."""
    tls = None if target.insecure else TlsFiles(target.ca, target.cert, target.key, target.deny_list)
    return controller_pb2_grpc.ControllerStub(channel_to(Role.CONTROLLER, "", target.controller, tls))


_INT64_TYPES = frozenset({FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_SINT64,
                          FieldDescriptor.TYPE_FIXED64, FieldDescriptor.TYPE_SFIXED64})


def as_dict(message) -> dict:
    """The message for --json, 64-bit integers as numbers (protobuf's JSON mapping writes them as
    strings, which scripts would have to convert: `seq`, `memory_mib`)."""
    data = MessageToDict(message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
    return _numbers(message.DESCRIPTOR, data)


def _numbers(descriptor, data: dict) -> dict:
    for field in descriptor.fields:
        if field.name not in data:
            continue
        repeated = field.is_repeated
        if field.type in _INT64_TYPES:
            data[field.name] = [int(v) for v in data[field.name]] if repeated else int(data[field.name])
        elif field.message_type is not None and not field.message_type.GetOptions().map_entry:
            for item in data[field.name] if repeated else [data[field.name]]:
                _numbers(field.message_type, item)
    return data


def age(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def table(rows: list[list[Any]], header: list[str]) -> str:
    cells = [header] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)


# -- commands: each returns (data for --json, text for people, exit code) ------------------------

def cmd_nodes(stub, args):
    reply = stub.ListNodes(controller_pb2.ListNodesRequest(), timeout=args.timeout)
    rows = [[n.node_id, n.state, f"{n.allocated_vcpus}/{n.cpus}", f"{n.allocated_memory_mib}/{n.memory_mib}",
             n.on_demand_vms, n.backfill_vms, f"{n.foreground_cpu_cores:.2f}", f"{n.potential_productivity:.2f}",
             "yes" if n.selected else "", age(n.last_report_age_seconds)] for n in reply.nodes]
    text = table(rows, ["NODE", "STATE", "VCPUS", "MEMORY_MIB", "ON_DEMAND", "BACKFILL", "FG_CPU", "P",
                        "SELECTED", "LAST_REPORT"]) if rows else "no nodes have reported yet"
    return as_dict(reply)["nodes"], text, 0


def lease_words(lease) -> tuple[str, str]:
    """A lease's role and state: the enums when the controller set them, else its strings (a
    previous release's controller)."""
    return (from_wire(controller_pb2.VmRole, VM_ROLE, lease.vm_role, lease.role),
            from_wire(controller_pb2.LeaseState, LEASE_STATE, lease.lease_state, lease.state))


def cmd_vms(stub, args):
    reply = stub.ListVms(controller_pb2.ListVmsRequest(include_ended=args.all), timeout=args.timeout)
    rows = [[l.lease_id, *lease_words(l), l.node_id, l.vcpus, l.memory_mib, l.owner, age(l.age_seconds), l.vm_name]
            for l in reply.leases]
    text = table(rows, ["LEASE", "ROLE", "STATE", "NODE", "VCPUS", "MEMORY_MIB", "OWNER", "AGE", "VM"]) \
        if rows else "no VMs"
    return as_dict(reply)["leases"], text, 0


def cmd_request(stub, args):
    """Ask for an on-demand VM. The request id (printed) makes it idempotent: when the call times
    out or the answer is still pending, gleanctl asks again with the same id until --timeout, so a
    retry never makes a second VM; run it again with --request-id ID to pick up the answer later."""
    request_id = args.request_id or f"req-{uuid.uuid4().hex[:12]}"
    print(f"request {request_id}", file=sys.stderr, flush=True)
    request = controller_pb2.VmRequest(vcpus=args.vcpus, memory_mib=args.memory, image=args.image, owner=args.owner,
                                       request_id=request_id)
    deadline = time.monotonic() + args.timeout
    while True:
        try:
            reply = stub.RequestVm(request, timeout=max(deadline - time.monotonic(), 1.0))
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.DEADLINE_EXCEEDED or time.monotonic() >= deadline:
                raise
            continue
        if reply.outcome != "pending" or time.monotonic() >= deadline:
            break
        time.sleep(1.0)
    if reply.outcome == "placed":
        victims = "".join(f"\n  preempted {p.lease_id} ({p.vm_name}): {p.outcome} in {p.seconds:.1f}s, "
                          f"{p.work_lost_vcpu_seconds:.0f} vCPU-s of work lost" for p in reply.preempted)
        text = (f"placed {reply.lease.lease_id} on {reply.lease.node_id} as {reply.lease.vm_name} "
                f"in {reply.total_seconds:.2f}s (decision {reply.decision_ms:.1f} ms, policy {reply.policy}, "
                f"request {reply.request_id}){victims}")
    elif reply.outcome == "pending":
        text = (f"pending: the controller is still working on request {reply.request_id}; ask again with "
                f"'gleanctl request --request-id {reply.request_id} ...' (same size and image)")
    else:
        text = f"{reply.outcome}: {reply.reason} (request {reply.request_id})"
    return as_dict(reply), text, 0 if reply.outcome == "placed" else EXIT_REFUSED


def cmd_cancel(stub, args):
    """Withdraw a request still waiting for room. Exit 0 once it is cancelled; 1 if it was
    answered first (its answer is printed); a placed one names its lease to release instead."""
    reply = stub.CancelRequest(controller_pb2.CancelRequestRequest(request_id=args.request_id), timeout=args.timeout)
    if reply.outcome == "cancelled":
        return as_dict(reply), f"cancelled request {reply.request_id}: {reply.reason}", 0
    text = f"request {reply.request_id} is {reply.outcome}, not waiting for room: {reply.reason or 'nothing to cancel'}"
    return as_dict(reply), text, EXIT_REFUSED


def cmd_release(stub, args):
    reply = stub.Release(controller_pb2.ReleaseRequest(lease_id=args.lease_id, force=args.force), timeout=args.timeout)
    if reply.lease.state in ("ended", "failed"):
        text = f"released {reply.lease.lease_id} ({reply.lease.vm_name}): {reply.outcome} in {reply.seconds:.1f}s"
        return as_dict(reply), text, 0
    text = (f"{reply.lease.lease_id} ({reply.lease.vm_name}) is still {reply.lease.state}: the controller keeps "
            f"stopping it; 'gleanctl vms' shows when it has ended")
    return as_dict(reply), text, EXIT_REFUSED


def cmd_backfill(stub, args):
    if args.action == "show":
        reply = stub.GetBackfill(controller_pb2.GetBackfillRequest(), timeout=args.timeout)
    else:
        changes = dict(parse_backfill_setting(item) for item in args.settings)
        if args.action in ("enable", "disable"):
            changes["enabled"] = args.action == "enable"
        elif not changes:
            raise UsageError("backfill set needs at least one KEY=VALUE")
        reply = stub.SetBackfill(controller_pb2.SetBackfillRequest(**changes), timeout=args.timeout)
    data = {f.name: getattr(reply, f.name) for f in reply.DESCRIPTOR.fields}  # numbers stay numbers
    return data, "\n".join(f"{k} = {json.dumps(v)}" for k, v in data.items()), 0


RESERVE_VERBS = ("set", "clear", "hint", "unhint")
RESERVE_USAGE = ("usage: gleanctl reserve [NODE|'*']  (shows)\n"
                 "       gleanctl reserve set NODE|'*' [--vcpus N] [--memory MIB] [--whole-node]\n"
                 "       gleanctl reserve clear NODE|'*'\n"
                 "       gleanctl reserve set KEY=VALUE ...  ([reserves] settings)\n"
                 "       gleanctl reserve hint N --in HOURS --for HOURS [--label L] | reserve unhint [--label L]")


def reserve_action(args) -> tuple[str, str | None]:
    """(what `reserve` does, the node of a per-node reserve). It reads unless a verb says
    otherwise: `reserve [NODE]` shows; `set NODE ...` and `clear NODE` change one node's
    reserve; `set KEY=VALUE ...` the [reserves] settings; `hint`, `unhint` the hints. --node
    names the node instead of the word after the verb (for a node named like a verb)."""
    verb = args.node if args.node in RESERVE_VERBS else None
    sized = bool(args.vcpus or args.memory or args.whole_node)
    if verb is None:
        node = _one_node(args.node, args.node_option)
        if args.rest:
            raise UsageError(f"unexpected arguments after the node: {' '.join(args.rest)}\n{RESERVE_USAGE}")
        if sized:   # `reserve node1 --vcpus 2` once set it; say what does that now, change nothing
            raise UsageError(f"`reserve {node or ''}` only shows; to change a node's reserve: gleanctl reserve "
                             f"set {node or 'NODE'} --vcpus N --memory MIB | --whole-node")
        return "show", node
    if verb in ("hint", "unhint"):
        if args.node_option is not None:
            raise UsageError(f"--node names the node of a per-node reserve; it does not go with `reserve {verb}`")
        return verb, None
    first = args.rest[0] if args.rest else ""
    if verb == "set" and args.node_option is None and not sized and \
            ("=" in first or first in checks.RESERVE_KEYS or not first):
        return "settings", None
    node = _one_node(first or None, args.node_option)
    extra = args.rest[1:] if first else args.rest
    if node is None or extra:
        raise UsageError(RESERVE_USAGE)
    if verb == "set" and not sized:
        raise UsageError(f"reserve set {node} needs --vcpus, --memory or --whole-node "
                         f"(`gleanctl reserve clear {node}` removes it)")
    if verb == "clear" and sized:
        raise UsageError("reserve clear takes no --vcpus, --memory or --whole-node")
    return verb, node


def _one_node(word: str | None, option: str | None) -> str | None:
    if word is not None and option is not None:
        raise UsageError(f"name the node once: {word!r} and --node {option!r}")
    return option if option is not None else word


def cmd_reserve(stub, args):
    action, node = reserve_action(args)
    if action in ("hint", "unhint"):
        return cmd_hint(stub, args)
    if action == "settings":
        return cmd_reserve_set(stub, args)
    if action in ("set", "clear"):   # all zero removes the reserve
        sizes = dict(vcpus=args.vcpus, memory_mib=args.memory, whole_node=args.whole_node) if action == "set" else {}
        reply = stub.SetReserve(controller_pb2.Reserve(node_id=node, **sizes), timeout=args.timeout)
        return reserve_table(reply, None if action == "set" else node, cleared=action == "clear")
    reply = stub.ListReserves(controller_pb2.ListReservesRequest(), timeout=args.timeout)
    if node is not None:
        return reserve_table(reply, node)
    status = stub.GetReserveStatus(controller_pb2.ReserveStatusRequest(), timeout=args.timeout)
    data, text, _ = reserve_table(reply, None)
    status_data, status_text = reserve_status(status)
    return dict(reserves=data, **status_data), f"{text}\n\n{status_text}", 0


def reserve_table(reply, node: str | None, cleared: bool = False) -> tuple[list, str, int]:
    """The per-node reserves (only `node`'s when named: '*', every node's, applies beside it)."""
    reserves = [r for r in reply.reserves if node is None or r.node_id == node]
    rows = [[r.node_id, r.vcpus, r.memory_mib, "yes" if r.whole_node else ""] for r in reserves]
    if rows:
        text = table(rows, ["NODE", "VCPUS", "MEMORY_MIB", "WHOLE_NODE"])
    elif node is None:
        text = "no per-node reserves"
    else:
        text = f"{'cleared: ' if cleared else ''}no reserve for {node}"
    return [as_dict(r) for r in reserves], text, 0


def cmd_reserve_set(stub, args):
    """`reserve set KEY=VALUE ...`: change [reserves] settings now (they hold across restarts
    until the config file's [reserves] is edited)."""
    changes = reserve_changes(args.rest)
    status = stub.SetReserveSettings(controller_pb2.SetReserveSettingsRequest(**changes), timeout=args.timeout)
    data, text = reserve_status(status)
    return data, text, 0


def reserve_changes(items: list[str]) -> dict[str, Any]:
    """`reserve set`'s KEY=VALUE items, typed and each checked (SettingError, InvalidField)."""
    if not items:
        raise checks.SettingError(f"usage: gleanctl reserve set KEY=VALUE ... (KEY one of "
                                  f"{', '.join(checks.RESERVE_KEYS)}), or reserve set NODE --vcpus N ...")
    changes: dict[str, Any] = {}
    for item in items:
        key, value = checks.parse_reserve_setting(item)
        if key in changes:
            raise checks.SettingError(f"{key}: given twice")
        changes[key] = value
    return changes


def cmd_hint(stub, args):
    """`reserve hint N --in H --for D [--label L]`, or `reserve unhint [--label L]` (every hint without one)."""
    if args.node == "unhint":
        if args.rest:
            raise UsageError("reserve unhint takes no arguments but --label")
        status = stub.CancelHints(controller_pb2.CancelHintsRequest(label=args.label), timeout=args.timeout)
    else:
        nodes, in_hours, for_hours, label = hint_arguments(args)
        status = stub.AddHint(controller_pb2.AddHintRequest(nodes=nodes, in_hours=in_hours, for_hours=for_hours,
                                                            label=label), timeout=args.timeout)
    data, text = reserve_status(status)
    if status.note:
        text = f"warning: {status.note}\n{text}"
    return data, text, 0


def hint_arguments(args) -> tuple[int, float, float, str]:
    """`reserve hint N --in H --for D [--label L]` as (N, H, D, L), or UsageError."""
    if len(args.rest) != 1 or args.in_hours is None or args.for_hours is None:
        raise UsageError("usage: gleanctl reserve hint NODES --in HOURS --for HOURS [--label LABEL]")
    try:
        nodes = int(args.rest[0])
    except ValueError:
        raise UsageError(f"NODES must be a whole number, not {args.rest[0]!r}") from None
    return nodes, args.in_hours, args.for_hours, args.label


def reserve_status(status) -> tuple[dict, str]:
    """Balancer's reserves as gleanctl shows them: settings, the target and why, hints, nodes."""
    settings = json.loads(status.settings_json)
    data = dict(as_dict(status), settings=settings)
    data.pop("settings_json", None)
    lines = ["reserves   " + ", ".join(f"{k}={v}" for k, v in sorted(settings.items())),
             f"now        {status.explain}",
             f"reserved   {', '.join(status.reserved_nodes) or 'none'} (at the last fill pass)",
             f"waiting    {status.waiting_requests} on-demand requests wait for room"]
    when = lambda t: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))   # noqa: E731
    rows = [[h.nodes, when(h.start_at), when(h.until), h.label or "-"] for h in status.hints]
    lines.append(table(rows, ["HINT_NODES", "FROM", "UNTIL", "LABEL"]) if rows else "no hints")
    return data, "\n".join(lines)


def cmd_events(stub, args):
    # Without --after: the newest events; with it: the events after that sequence number, oldest first.
    reply = stub.ListEvents(controller_pb2.ListEventsRequest(after_seq=args.after, limit=args.limit, kind=args.kind,
                                                             newest=not args.after), timeout=args.timeout)
    lines = [f"{e.seq:>6} {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(e.at))} {e.kind:<20} "
             f"{e.node_id or '-':<12} {e.lease_id or '-':<16} {e.detail_json}" for e in reply.events]
    events = [dict(as_dict(e), detail=json.loads(e.detail_json)) for e in reply.events]
    for e in events:
        e.pop("detail_json", None)
    return events, "\n".join(lines) or "no events", 0


def cmd_status(stub, args):
    s = stub.Status(controller_pb2.StatusRequest(), timeout=args.timeout)

    def share(part: float, whole: float) -> str:
        return f"{part / whole * 100:.0f}%" if whole else "-"
    text = "\n".join([
        f"nodes      {s.nodes_up} up, {s.nodes_suspect} suspect, {s.nodes_down} down",
        f"vCPUs      {s.on_demand_vcpus + s.backfill_vcpus}/{s.cpus} allocated ({share(s.on_demand_vcpus + s.backfill_vcpus, s.cpus)}):"
        f" on-demand {s.on_demand_vcpus} ({s.on_demand_vms} VMs), backfill {s.backfill_vcpus} ({s.backfill_vms} VMs)",
        f"memory     {s.on_demand_memory_mib + s.backfill_memory_mib}/{s.memory_mib} MiB allocated:"
        f" on-demand {s.on_demand_memory_mib}, backfill {s.backfill_memory_mib}",
        f"CPU used   foreground {s.foreground_cpu_cores:.2f} cores ({share(s.foreground_cpu_cores, s.cpus)}),"
        f" backfill {s.backfill_cpu_cores:.2f} cores ({share(s.backfill_cpu_cores, s.cpus)})",
        f"backfill   {'enabled' if s.backfill_enabled else 'disabled'}; {s.preemptions} preemptions,"
        f" {s.rejections} rejected requests so far",
    ])
    return as_dict(s), text, 0


MAX_TIMEOUT_SECONDS = 86400.0


def finite(low: float, high: float) -> Callable[[str], float]:
    """An argparse type: a number within [low, high] (nan and inf are within none), else a usage
    error naming the range."""
    def number(text: str) -> float:
        try:
            return ids.bounded(float(text), low, high, "value")
        except ValueError:   # not a number, or InvalidField: outside the range
            raise argparse.ArgumentTypeError(f"{text!r} is not a number within {low:g}..{high:g}") from None
    return number


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gleanctl", description="Drive a Gleaner pool.")
    parser.add_argument("--controller", help="HOST:PORT of the controller (default 127.0.0.1:7450)")
    parser.add_argument("--config", type=Path, help=f"TOML with [gleanctl] controller and [tls] (default {DEFAULT_CONFIG})")
    parser.add_argument("--ca", type=Path)
    parser.add_argument("--cert", type=Path)
    parser.add_argument("--key", type=Path)
    parser.add_argument("--insecure", action="store_true",
                        help="no TLS: only for a controller listening on a unix socket (--controller unix:PATH), "
                             "the only place it serves without TLS")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument("--timeout", type=finite(0.1, MAX_TIMEOUT_SECONDS), default=120.0,
                        help="seconds to wait for the controller")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("nodes", help="nodes, their state, allocation and potential productivity")
    vms = sub.add_parser("vms", help="VMs with role, node and age")
    vms.add_argument("--all", action="store_true", help="include ended leases")
    request = sub.add_parser("request", help="place an on-demand VM")
    # no default size: a request that forgot it would place (and maybe preempt for) a VM nobody asked for
    request.add_argument("--vcpus", type=int, required=True)
    request.add_argument("--memory", type=int, required=True, help=f"MiB, at least {checks.MIN_MEMORY_MIB}")
    request.add_argument("--image", default="tiny")
    request.add_argument("--owner", default="admin")
    request.add_argument("--request-id", help="idempotency key (default: a new one)")
    cancel = sub.add_parser("cancel", help="withdraw an on-demand request still waiting for room")
    cancel.add_argument("request_id")
    release = sub.add_parser("release", help="stop a VM and end its lease")
    release.add_argument("lease_id")
    release.add_argument("--force", action="store_true", help="destroy at once, no clean shutdown")
    backfill = sub.add_parser("backfill", help="show or change the backfill configuration")
    backfill.add_argument("action", choices=["show", "set", "enable", "disable"])
    backfill.add_argument("settings", nargs="*", metavar="KEY=VALUE")
    reserve = sub.add_parser(
        "reserve", help="show reserves (per node, and Balancer's: static, predictive, hints, wait window); "
                        "change only with a verb: `reserve set NODE --vcpus N --memory MIB | --whole-node`, "
                        "`reserve clear NODE`, `reserve set KEY=VALUE ...` ([reserves] settings), "
                        "`reserve hint N --in H --for D` / `reserve unhint [--label L]`")
    reserve.add_argument("node", nargs="?", help="a node id, or '*' for every node, to show; or set, clear, "
                                                 "hint, unhint")
    reserve.add_argument("--node", dest="node_option", metavar="NODE",
                         help="the node of a per-node reserve (for a node named set, clear, hint or unhint)")
    reserve.add_argument("rest", nargs="*", help="with set or clear: the node, or with set KEY=VALUE settings; "
                                                 "with hint: the number of nodes")
    reserve.add_argument("--in", dest="in_hours", type=float, help="hint: hours until the nodes are needed")
    reserve.add_argument("--for", dest="for_hours", type=float, help="hint: hours they are needed for")
    reserve.add_argument("--label", default="", help="hint: who or what it is for; unhint: which hints to drop")
    reserve.add_argument("--vcpus", type=int, default=0)
    reserve.add_argument("--memory", type=int, default=0, help="MiB")
    reserve.add_argument("--whole-node", action="store_true")
    events = sub.add_parser("events", help="the audit log")
    events.add_argument("--after", type=int, default=0,
                        help="the events after this sequence number, oldest first (default: the newest)")
    events.add_argument("--limit", type=int, default=50, help="at most this many (the controller caps it at 1000)")
    events.add_argument("--kind", default="", help="e.g. vm.preempted, request.rejected, node.down")
    sub.add_parser("status", help="pool utilization: allocated and used, foreground versus backfill")
    pkicmd.add_parser(sub)
    return parser


COMMANDS: dict[str, Callable] = {"nodes": cmd_nodes, "vms": cmd_vms, "request": cmd_request, "cancel": cmd_cancel,
                                 "release": cmd_release,
                                 "backfill": cmd_backfill, "reserve": cmd_reserve, "events": cmd_events,
                                 "status": cmd_status}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        check_arguments(args)
    except ids.InvalidField as exc:
        print(f"gleanctl: invalid argument {exc}", file=sys.stderr)
        return EXIT_INVALID
    except (checks.SettingError, UsageError) as exc:
        print(f"gleanctl: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        if args.command == "pki":  # local files only: no controller involved
            data, text = pkicmd.run(args)
            print(json.dumps(data, indent=2, sort_keys=True) if args.json else text)
            return 0
        target = load_target(args)
        data, text, code = COMMANDS[args.command](stub_for(target), args)
    except (UsageError, ConfigError, PkiError, OSError, ValueError) as exc:
        print(f"gleanctl: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except grpc.RpcError as exc:
        code = exc.code()
        where = getattr(args, "controller", None) or "the controller"
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            print(f"gleanctl: cannot reach {where}: {exc.details()}", file=sys.stderr)
            return EXIT_UNREACHABLE
        print(f"gleanctl: {code.name.lower().replace('_', ' ')}: {exc.details()}", file=sys.stderr)
        return EXIT_INVALID if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND) else EXIT_REFUSED
    print(json.dumps(data, indent=2, sort_keys=True) if args.json else text)
    return code


if __name__ == "__main__":
    sys.exit(main())
