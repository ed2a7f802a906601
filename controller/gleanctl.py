"""gleanctl: drive a Gleaner pool from the command line.

    gleanctl [GLOBAL FLAGS] COMMAND ... [GLOBAL FLAGS]

Global flags (--controller, --config, --ca, --cert, --key, --insecure, --timeout, -o/--output,
--json) go before or after the command, as kubectl's do. The configuration file is --config,
else $GLEANER_CONFIG, else ~/.config/gleaner/gleanctl.toml, else /etc/gleaner/gleanctl.toml.

Exit codes (EXIT_CODES, one per class of error; README "Exit codes"): 0 done; 1 the controller
said no or not yet; 2 bad usage, value or configuration; 3 permission denied; 4 not found;
5 the controller unavailable or too slow; 130 interrupted (Ctrl-C).
"""
from __future__ import annotations

import argparse
import datetime
import difflib
import json
import os
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Mapping
from typing import Any, Callable

import grpc
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.json_format import MessageToDict

from gleaner_common import __version__, ids
from gleaner_common.config import ConfigError, parse_sections, read_toml
from gleaner_common.identity import Role
from gleaner_common.logs import quote
from gleaner_common.pki import PkiError, TlsFiles
from gleaner_common.rpc import channel_to
from protos import controller_pb2, controller_pb2_grpc
from protos.words import LEASE_STATE, VM_ROLE, from_wire

from . import checks, pkicmd
from . import tenants as tenancy
from .checks import parse_backfill_setting
from .core.goals import Deadline, goal_from_dict
from .core.records import INTERRUPTIONS, BackfillConfig, Policy
from .core.tenancy import TENANT_BACKFILL_KEYS

SYSTEM_CONFIG = Path("/etc/gleaner/gleanctl.toml")
DEFAULT_CONFIG = SYSTEM_CONFIG   # the name earlier releases used
CONFIG_ENV = "GLEANER_CONFIG"

# One exit code per class of error, so a script can tell "fix what you typed" from "try again".
EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_DENIED, EXIT_NOT_FOUND, EXIT_UNAVAILABLE = 0, 1, 2, 3, 4, 5
EXIT_INTERRUPTED = 130            # 128 + SIGINT, as shells report a Ctrl-C
EXIT_INVALID = EXIT_USAGE         # a bad value is a usage error, whoever finds it (gleanctl or the controller)
EXIT_UNREACHABLE = EXIT_UNAVAILABLE
EXIT_CODES = {
    EXIT_OK: "done",
    EXIT_REFUSED: "the controller said no or not yet: a request rejected, failed or still pending, a release "
                  "not confirmed within --timeout, a cancel too late, a conflict",
    EXIT_USAGE: "bad usage, value or configuration: an unknown command or flag, a value out of its bounds "
                "(checked here or by the controller), an unreadable config file or certificate",
    EXIT_DENIED: "permission denied: this identity may not make that call (a viewer changing things, a revoked "
                 "certificate)",
    EXIT_NOT_FOUND: "not found: no such lease, request or node",
    EXIT_UNAVAILABLE: "the controller cannot be reached, is overloaded, or did not answer within --timeout",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
}
# gRPC status codes by class; any other code (internal, unimplemented...) is EXIT_REFUSED.
RPC_EXIT = {grpc.StatusCode.INVALID_ARGUMENT: EXIT_USAGE, grpc.StatusCode.OUT_OF_RANGE: EXIT_USAGE,
            grpc.StatusCode.PERMISSION_DENIED: EXIT_DENIED, grpc.StatusCode.UNAUTHENTICATED: EXIT_DENIED,
            grpc.StatusCode.NOT_FOUND: EXIT_NOT_FOUND,
            grpc.StatusCode.UNAVAILABLE: EXIT_UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED: EXIT_UNAVAILABLE,
            grpc.StatusCode.RESOURCE_EXHAUSTED: EXIT_UNAVAILABLE}


class NotFound(Exception):
    """What the command names does not exist (exit EXIT_NOT_FOUND)."""


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


def user_config(env: Mapping[str, str]) -> Path:
    """~/.config/gleaner/gleanctl.toml, or under $XDG_CONFIG_HOME when that is set (the XDG rule)."""
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(base) / "gleaner" / "gleanctl.toml"


def find_config(explicit: Path | None, env: Mapping[str, str]) -> tuple[Path | None, list[str]]:
    """(the configuration file to read, every place looked at, in order). --config, then
    $GLEANER_CONFIG: named on purpose, so one that is missing is an error (ConfigError), never
    skipped; then the user's file, then the system's, each read if it exists."""
    if explicit is not None:
        return explicit, [f"--config {explicit}"]
    tried = ["--config (not given)"]
    named = env.get(CONFIG_ENV)
    if named:
        if not Path(named).exists():
            raise ConfigError(f"${CONFIG_ENV} names {named}, which does not exist")
        return Path(named), tried + [f"${CONFIG_ENV} {named}"]
    tried.append(f"${CONFIG_ENV} (not set)")
    for path in (user_config(env), SYSTEM_CONFIG):
        tried.append(str(path))
        if path.exists():
            return path, tried
    return None, tried


def load_target(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> Target:
    """Flags override the configuration file (find_config); an incomplete TLS setting names
    where it looked."""
    values: dict[str, Any] = {}
    path, tried = find_config(args.config, os.environ if env is None else env)
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
        source = f"{path} has no complete [tls] ca, cert, key" if path is not None else \
            "no configuration file found; looked at: " + ", ".join(tried)
        raise UsageError(f"mutual TLS needs --ca, --cert and --key (or a config file with [tls] ca, cert, key): "
                         f"{source}. --insecure only works against a controller listening without TLS on a "
                         "unix socket")
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
    elif args.command == "events":
        event_kind(args.kind)
    elif args.command == "tenant":
        tenant_arguments(args)


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
             n.on_demand_vms, n.backfill_vms, f"{n.on_demand_cpu_cores:.2f}+{n.host_other_cpu_cores:.2f}",
             f"{n.potential_productivity:.2f}", "yes" if n.selected else "", next_fill(n),
             age(n.last_report_age_seconds)] for n in reply.nodes]
    text = table(rows, ["NODE", "STATE", "VCPUS", "MEMORY_MIB", "ON_DEMAND", "BACKFILL", "FG_CPU(VMS+HOST)", "P",
                        "SELECTED", "NEXT_FILL", "LAST_REPORT"]) if rows else "no nodes have reported yet"
    if any(n.fill_code not in ("fills", "full", "") for n in reply.nodes):
        text += "\n(NEXT_FILL says why backfill would not fill a node: gleanctl explain NODE has the figures)"
    return as_dict(reply)["nodes"], text, 0


def next_fill(node) -> str:
    """What the next fill would do with the node: +N VMs, or why not in a word."""
    return f"+{node.fill_vms}" if node.fill_code == "fills" else node.fill_code


def cmd_explain(stub, args):
    """Why backfill fills a node or not, with the figures that decide it."""
    reply = stub.ListNodes(controller_pb2.ListNodesRequest(), timeout=args.timeout)
    node = next((n for n in reply.nodes if n.node_id == args.node), None)
    if node is None:
        known = ", ".join(sorted(n.node_id for n in reply.nodes)[:20]) or "none yet"
        raise NotFound(f"no node {args.node!r} has reported to this controller (known: {known})")
    verdict = f"backfill would start {node.fill_vms} VM(s) there" if node.fill_code == "fills" else \
        f"backfill would start nothing there ({node.fill_code})"
    lines = [f"node {node.node_id} ({node.state}): {verdict}",
             f"  CPU: {node.cpus}; foreground {node.foreground_cpu_cores:.2f} cores in its last report = on-demand "
             f"VMs {node.on_demand_cpu_cores:.2f} + the host's other load {node.host_other_cpu_cores:.2f}; predicted "
             f"{node.predicted_foreground_cpu_cores:.2f}; P {node.potential_productivity:.2f}",
             f"  allocated {node.allocated_vcpus}/{node.cpus} vCPUs, {node.allocated_memory_mib}/{node.memory_mib} "
             f"MiB; {node.backfill_vms} backfill VMs; selected as a volunteer: {'yes' if node.selected else 'no'}"]
    lines += [f"  - {reason}" for reason in node.fill_reasons]
    return as_dict(node), "\n".join(lines), 0


def lease_words(lease) -> tuple[str, str]:
    """A lease's role and state: the enums when the controller set them, else its strings (a
    previous release's controller)."""
    return (from_wire(controller_pb2.VmRole, VM_ROLE, lease.vm_role, lease.role),
            from_wire(controller_pb2.LeaseState, LEASE_STATE, lease.lease_state, lease.state))


def cmd_vms(stub, args):
    reply = stub.ListVms(controller_pb2.ListVmsRequest(include_ended=args.all), timeout=args.timeout)
    rows = [[l.lease_id, *lease_words(l), l.node_id, l.vcpus, l.memory_mib, l.owner, age(l.age_seconds), l.vm_name,
             progress_text(l.progress_done, l.progress_total)] for l in reply.leases]
    text = table(rows, ["LEASE", "ROLE", "STATE", "NODE", "VCPUS", "MEMORY_MIB", "OWNER", "AGE", "VM", "PROGRESS"]) \
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
    data = as_dict(reply)
    if reply.outcome == "placed":
        stops = victims_stopped(stub, args, [p.lease_id for p in reply.preempted])
        victims = "".join(f"\n  preempted {p.lease_id} ({p.vm_name}): {p.outcome} in {p.seconds:.1f}s, "
                          f"{work_text(p, stops.get(p.lease_id), item)}"
                          for p, item in zip(reply.preempted, data["preempted"]))
        text = (f"placed {reply.lease.lease_id} on {reply.lease.node_id} as {reply.lease.vm_name} "
                f"in {reply.total_seconds:.2f}s (decision {reply.decision_ms:.1f} ms, policy {reply.policy}, "
                f"request {reply.request_id}){victims}")
    elif reply.outcome == "pending":
        text = (f"pending: the controller is still working on request {reply.request_id}; ask again with "
                f"'gleanctl request --request-id {reply.request_id} ...' (same size and image)")
    else:
        text = f"{reply.outcome}: {reply.reason} (request {reply.request_id})"
    return data, text, 0 if reply.outcome == "placed" else EXIT_REFUSED


# The audit events that end a victim's preemption, and the figure each gives of its work.
STOP_EVENTS = {"vm.preempted": "work_lost_vcpu_seconds", "vm.hibernated": "work_kept_vcpu_seconds"}
STOP_EVENTS_READ = 200   # the newest of each kind: a request's victims stopped moments ago


def victims_stopped(stub, args, lease_ids: list[str]) -> dict[str, controller_pb2.AuditEvent]:
    """The event that ended each victim's preemption (vm.preempted or vm.hibernated), for the
    victims that have stopped: their figures are final, the reply's are the decision's estimate."""
    if not lease_ids:
        return {}
    found: dict[str, controller_pb2.AuditEvent] = {}
    for kind in STOP_EVENTS:
        reply = stub.ListEvents(controller_pb2.ListEventsRequest(kind=kind, limit=STOP_EVENTS_READ, newest=True),
                                timeout=args.timeout)
        found.update((e.lease_id, e) for e in reply.events if e.lease_id in lease_ids)
    return found


def work_text(victim, stop: controller_pb2.AuditEvent | None, item: dict) -> str:
    """A victim's work as the CLI says it: the final figure when it has stopped (vm.preempted:
    lost; vm.hibernated: kept), else the decision's, labelled an estimate. `item` (its --json
    entry) gets the same: work_lost_vcpu_seconds final where known, work_lost_is_estimate."""
    if stop is None:
        item["work_lost_is_estimate"] = True
        return (f"about {victim.work_lost_vcpu_seconds:.1f} vCPU-s of work lost (estimate: it has not stopped yet; "
                f"`gleanctl events --kind vm.preempted` gives the final figure)")
    figure = float(json.loads(stop.detail_json).get(STOP_EVENTS[stop.kind], 0.0))
    item["work_lost_is_estimate"] = False
    if stop.kind == "vm.hibernated":
        item.update(work_lost_vcpu_seconds=0.0, work_kept_vcpu_seconds=figure)
        return f"saved (hibernated), {figure:.1f} vCPU-s of work kept"
    item["work_lost_vcpu_seconds"] = figure
    return f"{figure:.1f} vCPU-s of work lost"


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


# The audit events' kinds (docs/controller.md, Audit events, lists the same: a test holds them equal).
EVENT_KINDS = (
    "request.placed", "request.rejected", "request.queued", "request.cancelled", "request.victims_gone",
    "request.expired",
    "vm.launched", "vm.launch_failed", "vm.preempting", "vm.preempted", "vm.hibernated", "vm.hibernate_refused",
    "vm.resuming", "vm.resumed", "vm.resume_failed", "vm.discarded", "vm.unknown_hibernated", "vm.stopping",
    "vm.stopped", "vm.released", "vm.recycled", "vm.drained", "vm.cancelling", "vm.stop_failed", "vm.stop_expired",
    "vm.lost", "vm.recovered", "vm.gone", "vm.adopted", "vm.adoption_deferred", "vm.conflict", "vm.unexpected",
    "node.joined", "node.up", "node.rejoined", "node.suspect", "node.down", "node.redriven",
    "selection.swap", "backfill.configured",
    "reserve.set", "reserve.configured", "reserve.changed", "reserve.hint", "reserve.hint_cancelled",
    "report.refused", "rpc.denied", "tenant.created", "tenant.changed", "tenant.deleted",
    "tenants.lower_bounds_scaled", "tenants.lower_bounds_restored", "tenant.goal_on_track", "tenant.goal_at_risk",
    "tenant.goal_done")


def event_kind(kind: str) -> str:
    """--kind: one of EVENT_KINDS, else a UsageError naming the closest and every known kind
    (an unknown kind would otherwise read as "no events")."""
    if kind and kind not in EVENT_KINDS:
        close = difflib.get_close_matches(kind, EVENT_KINDS, n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(close)}?" if close else "."
        raise UsageError(f"--kind {kind!r} is not an event kind{hint} Known kinds: {', '.join(EVENT_KINDS)}")
    return kind


def cmd_events(stub, args):
    # Without --after: the newest events; with it: the events after that sequence number, oldest first.
    reply = stub.ListEvents(controller_pb2.ListEventsRequest(after_seq=args.after, limit=args.limit, kind=args.kind,
                                                             newest=not args.after), timeout=args.timeout)
    if args.follow:
        follow_events(stub, args, reply)
    return events_data(reply.events), events_table(reply.events) if reply.events else "no events", 0


FOLLOW_CALL_SECONDS = 600   # one stream's length: then gleanctl asks again, from the last event it printed
FOLLOW_WIDTHS = (7, 20, 22, 14, 22)   # a stream's table cannot measure rows to come: fixed columns


def follow_events(stub, args, first) -> None:
    """`events --follow`: the newest events (or those after --after), then each new one as the
    controller writes it, until Ctrl-C (KeyboardInterrupt, exit 130). Text: one table, its header
    first; -o json: one JSON object a line. A stream that ends at its bound is opened again."""
    print_events(first.events, args, header=True)
    after = first.last_seq
    while True:
        request = controller_pb2.FollowEventsRequest(after_seq=after, kind=args.kind, max_seconds=FOLLOW_CALL_SECONDS)
        try:
            for batch in stub.FollowEvents(request, timeout=FOLLOW_CALL_SECONDS + 30):
                print_events(batch.events, args)
                after = batch.last_seq
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                raise


def print_events(events, args, header: bool = False) -> None:
    if args.json:
        for event in events_data(events):
            print(json.dumps(event, sort_keys=True), flush=True)
        return
    rows = ([EVENTS_HEADER] if header else []) + [event_row(e) for e in events]
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, FOLLOW_WIDTHS)) + "  " + str(row[-1]), flush=True)


def event_row(e) -> list:
    return [e.seq, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(e.at)), e.kind, e.node_id or "-",
            e.lease_id or "-", detail_text(e.kind, json.loads(e.detail_json))]


EVENTS_HEADER = ["SEQ", "TIME", "KIND", "NODE", "LEASE", "DETAIL"]
# Figures of a decision, not of what happened: the text names them estimates (the final one is a
# later event's: vm.preempting's work at stake, vm.preempted's work lost).
ESTIMATES = {"vm.preempting": {"work_at_stake_vcpu_seconds": "work_lost_estimate_vcpu_seconds"}}


def events_table(events) -> str:
    return table([event_row(e) for e in events], EVENTS_HEADER)


def detail_text(kind: str, detail: dict) -> str:
    """An event's detail as KEY=VALUE pairs (logfmt's quoting: no control character reaches the
    terminal), its estimates renamed so (ESTIMATES)."""
    names = ESTIMATES.get(kind, {})
    return " ".join(f"{names.get(k, k)}={quote(v) if isinstance(v, str) else json.dumps(v)}"
                    for k, v in sorted(detail.items()))


def events_data(events) -> list[dict]:
    data = [dict(as_dict(e), detail=json.loads(e.detail_json)) for e in events]
    for e in data:
        e.pop("detail_json", None)
    return data


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
    ] + ([   # a previous release's controller has no tenants (and sends RBT 0): no line then
        f"tenants    {s.tenants_on_demand} on-demand, {s.tenants_batch} batch; upper bounds book"
        f" {s.tenants_upper_vcpus}/{s.cpus * s.tenants_rbt:g} vCPUs, {s.tenants_upper_memory_mib}/"
        f"{s.memory_mib * s.tenants_rbt:g} MiB (capacity x RBT {s.tenants_rbt:g})"] if s.tenants_rbt else []))
    return as_dict(s), text, 0


TENANT_USAGE = ("usage: gleanctl tenant show [NAME]\n"
                "       gleanctl tenant create NAME --kind on-demand|batch [--lower CPUS,MIB] --upper CPUS,MIB\n"
                "       gleanctl tenant set NAME [--lower CPUS,MIB] [--upper CPUS,MIB]\n"
                "       gleanctl tenant delete NAME [--drain]\n"
                "       gleanctl tenant goal NAME --work VCPU_HOURS (--deadline TIME | --least-cost PRICE) | --clear\n"
                "       gleanctl tenant backfill NAME [--reset] [KEY=VALUE ...]   (KEY: enabled, image, vcpus, "
                "memory_mb, max_instances)")


def tenant_arguments(args) -> None:
    """`tenant ...`'s name and sizes, checked by the controller's own rules (controller/tenants.py)
    before any call: InvalidField names the field. The sizes land on args.lower_size, upper_size."""
    if args.name is not None or args.action != "show":
        tenancy.name(args.name or "", "name")
    built_in = args.name in tenancy.BUILT_IN_TENANTS
    args.lower_size = tenancy.parse_size(args.lower, "lower") if getattr(args, "lower", None) is not None else None
    args.upper_size = tenancy.parse_size(args.upper, "upper", allow_unbounded=built_in) \
        if getattr(args, "upper", None) is not None else None
    if args.action == "create":
        tenancy.checked(args.name, args.kind, args.lower_size or tenancy.ZERO, args.upper_size)
    elif args.action == "goal":
        args.goal_request = goal_request(args)   # before any call: a usage error names the flag
    elif args.action == "backfill":
        args.backfill_changes = tenant_backfill_changes(args.name, args.settings)
        if not args.backfill_changes and not args.reset:
            raise UsageError(f"tenant backfill {args.name} needs KEY=VALUE settings or --reset\n{TENANT_USAGE}")
    elif args.action == "set":
        if args.lower_size is None and args.upper_size is None:
            raise UsageError(f"tenant set {args.name} needs --lower CPUS,MIB or --upper CPUS,MIB\n{TENANT_USAGE}")
        if args.lower_size is not None and args.upper_size is not None:
            tenancy.bounds(args.name, args.lower_size, args.upper_size)


def tenant_backfill_changes(name: str, items: list[str]) -> dict:
    """`tenant backfill`'s KEY=VALUE settings, typed (the pool-wide settings' parser); a key a batch
    tenant cannot set on its own is a usage error naming the ones it can."""
    changes = dict(checks.parse_backfill_setting(item) for item in items)
    foreign = sorted(set(changes) - set(TENANT_BACKFILL_KEYS))
    if foreign:
        raise UsageError(f"tenant backfill {name}: {', '.join(foreign)} cannot be set per tenant (the pool's, "
                         f"`gleanctl backfill set`); a tenant's own: {', '.join(TENANT_BACKFILL_KEYS)}")
    return changes


def size_text(vcpus: int, memory_mib: int, unbounded_if_zero: bool = False) -> str:
    return "unbounded" if unbounded_if_zero and not vcpus and not memory_mib else f"{vcpus},{memory_mib}"


def progress_text(done: int, total: int, none: str = "") -> str:
    """A guest's `progress DONE TOTAL` as people read it: DONE/TOTAL; `none` when none was said (0/0)."""
    return f"{done}/{total}" if total else none


def tenants_text(reply) -> str:
    """The tenants as a table, then the pool's figures admission books against."""
    rows = [[t.name, t.kind.replace("_", "-"), size_text(t.lower_vcpus, t.lower_memory_mib),
             size_text(t.upper_vcpus, t.upper_memory_mib, True), size_text(t.used_vcpus, t.used_memory_mib),
             len(t.lease_ids), "yes" if t.built_in else "",
             time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t.created_at)),
             progress_text(t.progress_done, t.progress_total, "-") if t.kind == "batch" else "",
             goal_state_text(t)]
            for t in reply.tenants]
    text = table(rows, ["NAME", "KIND", "LOWER(VCPUS,MIB)", "UPPER(VCPUS,MIB)", "USED(VCPUS,MIB)", "VMS",
                        "BUILT_IN", "CREATED", "PROGRESS", "GOAL"])
    booked = [t for t in reply.tenants if t.upper_vcpus or t.upper_memory_mib]
    vcpus, mib = sum(t.upper_vcpus for t in booked), sum(t.upper_memory_mib for t in booked)
    return (f"{text}\npool: {reply.capacity_vcpus} vCPUs, {reply.capacity_memory_mib} MiB up; the bounded upper "
            f"bounds book {vcpus} vCPUs, {mib} MiB of capacity x RBT {reply.rbt:g}; URR {reply.urr:g}")


def tenant_detail(tenant) -> str:
    """One tenant's lines under the table: its VMs, and a batch tenant's backfill settings and goal."""
    lines = [f"  VM {lease_id}" for lease_id in tenant.lease_ids]
    if tenant.kind == "batch":
        lines.append(f"  backfill settings: {tenant.backfill_json or 'the pool-wide ones (gleanctl backfill show)'}")
        lines.append(f"  goal: {tenant.goal_json or 'none'}")
        if tenant.goal_state:
            lines.append(f"  {goal_state_text(tenant)}: {tenant.goal_explain}; dedicated {tenant.goal_dedicated_vcpus} "
                         f"vCPUs, volunteers {tenant.goal_volunteer_vcpus} vCPUs now")
    return "".join(f"\n{line}" for line in lines)


def goal_state_text(tenant) -> str:
    """A goal's state as the table shows it: on track or at risk, and the projected finish; or done."""
    if not tenant.goal_state:
        return "-" if tenant.goal_json else ""
    if tenant.goal_state == "done":
        return "done"
    finish = "never" if not tenant.goal_projected_finish else \
        time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(tenant.goal_projected_finish))
    text = f"{tenant.goal_state.replace('_', ' ')}, finish {finish}"
    deadline = _deadline_s(tenant.goal_json)
    if deadline is None:
        return text
    late = not tenant.goal_projected_finish or tenant.goal_projected_finish > deadline
    if tenant.goal_state == "at_risk" and not late:
        # sized as if no on-demand VM leaves (at risk), projected with those expected to leave
        text += " (by the deadline only if on-demand VMs leave as they have)"
    elif tenant.goal_state == "on_track" and late:
        # sized at the rate measured on the residual now; projected at no more than the goal states
        # (goals.projection_rate), and in waves of its tasks on what it holds (job_progress.wave_finish)
        text += " (on track as sized; the finish projected comes after the deadline: the explanation says why)"
    return text


def _deadline_s(goal_json: str) -> float | None:
    """A stored goal's deadline (None for a least-cost goal, or one that does not parse)."""
    try:
        goal = goal_from_dict(json.loads(goal_json))
    except ValueError:   # InvalidField too
        return None
    return goal.deadline_s if isinstance(goal, Deadline) else None


def goal_request(args) -> controller_pb2.SetTenantGoalRequest:
    """`tenant goal`'s flags as the request (their bounds are the controller's to check)."""
    if args.clear:
        return controller_pb2.SetTenantGoalRequest(name=args.name, clear=True)
    if (args.deadline is None) == (args.least_cost is None) or args.work is None:
        raise UsageError(f"tenant goal {args.name} needs --work VCPU_HOURS and one of --deadline TIME or "
                         f"--least-cost PRICE (or --clear)\n{TENANT_USAGE}")
    if args.deadline is not None:
        return controller_pb2.SetTenantGoalRequest(name=args.name, kind="deadline", work_vcpu_hours=args.work,
                                                   deadline=parse_deadline(args.deadline, time.time()))
    return controller_pb2.SetTenantGoalRequest(
        name=args.name, kind="least_cost", work_vcpu_hours=args.work, price_per_dedicated_vcpu_hour=args.least_cost,
        price_per_volunteer_vcpu_hour=args.volunteer_price, fixed_cost_per_hour=args.fixed_cost)


def parse_deadline(text: str, now: float) -> float:
    """A deadline as typed: +Nh / +Nm / +Ns from now, or an ISO 8601 time (UTC unless it says)."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0}
    if text.startswith("+") and text[-1:] in units:
        try:
            return now + float(text[1:-1]) * units[text[-1]]
        except ValueError:
            pass
    else:
        try:
            moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=datetime.timezone.utc)
            return moment.timestamp()
        except ValueError:
            pass
    raise UsageError(f"--deadline {text!r}: give +Nh, +Nm or +Ns from now, or an ISO 8601 time such as "
                     "2026-12-01T18:00:00Z")


def cmd_tenant(stub, args):
    """`tenant show [NAME]`, `create`, `set`, `delete [--drain]`, `backfill` (admins change, people read)."""
    if args.action == "show":
        reply = stub.ListTenants(controller_pb2.ListTenantsRequest(name=args.name or ""), timeout=args.timeout)
        text = tenants_text(reply)
        if args.name:
            text += tenant_detail(reply.tenants[0])
        return as_dict(reply), text, 0
    if args.action == "create":
        lower, upper = args.lower_size or tenancy.ZERO, args.upper_size
        reply = stub.CreateTenant(controller_pb2.CreateTenantRequest(
            name=args.name, kind=tenancy.kind(args.kind), lower_vcpus=lower.vcpus, lower_memory_mib=lower.memory_mib,
            upper_vcpus=upper.vcpus, upper_memory_mib=upper.memory_mib), timeout=args.timeout)
        verb = "created"
    elif args.action == "set":
        changes = {}
        for which, size in (("lower", args.lower_size), ("upper", args.upper_size)):
            if size is not None:
                changes.update({f"{which}_vcpus": size.vcpus, f"{which}_memory_mib": size.memory_mib})
        reply = stub.SetTenant(controller_pb2.SetTenantRequest(name=args.name, **changes), timeout=args.timeout)
        verb = "set"
    elif args.action == "goal":
        reply = stub.SetTenantGoal(args.goal_request, timeout=args.timeout)
        return as_dict(reply), f"tenant {reply.name}'s goal: {reply.goal_json or 'none'}" + \
            (f"\n{goal_state_text(reply)}: {reply.goal_explain}" if reply.goal_state else ""), 0
    elif args.action == "backfill":
        reply = stub.SetTenantBackfill(controller_pb2.SetTenantBackfillRequest(
            name=args.name, reset=args.reset, **args.backfill_changes), timeout=args.timeout)
        own = reply.backfill_json or "none: the pool-wide ones"
        return as_dict(reply), f"tenant {reply.name}'s own backfill settings: {own}", 0
    else:
        done = stub.DeleteTenant(controller_pb2.DeleteTenantRequest(name=args.name, drain=args.drain),
                                 timeout=args.timeout)
        drained = f" after releasing {', '.join(done.released)}" if done.released else ""
        return as_dict(done), f"deleted tenant {done.tenant.name}{drained}", 0
    text = (f"{verb} tenant {reply.name} ({reply.kind.replace('_', '-')}): lower "
            f"{size_text(reply.lower_vcpus, reply.lower_memory_mib)}, upper "
            f"{size_text(reply.upper_vcpus, reply.upper_memory_mib, True)} (vCPUs,MiB)")
    return as_dict(reply), text, 0


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


class Parser(argparse.ArgumentParser):
    """argparse with "did you mean": a word that is not one of a command's (or a choice's) names
    gets the closest ones (difflib) in the usage error, which still exits 2."""

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if action.choices is not None and value not in action.choices:
            choices = [str(c) for c in action.choices]
            close = difflib.get_close_matches(str(value), choices, n=3, cutoff=0.6)
            hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            raise argparse.ArgumentError(action, f"invalid choice: {value!r}{hint} (choose from "
                                                 f"{', '.join(choices)})")
        super()._check_value(action, value)


OUTPUTS = ("table", "json")
# The global flags' defaults. Each flag is defined on the main parser and on every command's
# with default SUPPRESS, so it is read wherever it stands and a command's parser never
# overwrites one given before the command; the defaults are filled in after parsing.
GLOBAL_DEFAULTS = dict(controller=None, config=None, ca=None, cert=None, key=None, insecure=False, output="table",
                       timeout=120.0)


def global_flags(output_only: bool = False) -> argparse.ArgumentParser:
    """The flags that go anywhere on the line, as a parent parser (`output_only`: -o and --json,
    for `pki`, which reaches no controller)."""
    flags = argparse.ArgumentParser(add_help=False)
    group = flags.add_argument_group("global flags (before or after the command)")
    add = lambda *names, **kw: group.add_argument(*names, default=argparse.SUPPRESS, **kw)   # noqa: E731
    add("-o", "--output", choices=OUTPUTS, help="table (default) or json")
    add("--json", dest="output", action="store_const", const="json", help="the same as -o json")
    if output_only:
        return flags
    add("--controller", help="HOST:PORT of the controller (default 127.0.0.1:7450)")
    add("--config", type=Path, help=f"TOML with [gleanctl] controller and [tls] (default: ${CONFIG_ENV}, else "
                                    f"~/.config/gleaner/gleanctl.toml, else {SYSTEM_CONFIG})")
    add("--ca", type=Path)
    add("--cert", type=Path)
    add("--key", type=Path)
    add("--insecure", action="store_true",
        help="no TLS: only for a controller listening on a unix socket (--controller unix:PATH), the only place "
             "it serves without TLS")
    add("--timeout", type=finite(0.1, MAX_TIMEOUT_SECONDS), help="seconds to wait for the controller (default 120)")
    return flags


def version_text() -> str:
    return f"gleanctl {__version__} (protocol {controller_pb2.DESCRIPTOR.package})"


def build_parser() -> argparse.ArgumentParser:
    parents = [global_flags()]
    parser = Parser(prog="gleanctl", description="Drive a Gleaner pool.", parents=parents,
                    epilog="exit codes: " + "; ".join(f"{code} {text.split(':')[0]}"
                                                      for code, text in EXIT_CODES.items()))
    parser.add_argument("--version", action="version", version=version_text())
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, aliases: tuple[str, ...] = (), **kw) -> argparse.ArgumentParser:
        """A command's parser; its aliases (singular or plural, as kubectl takes either) run it too."""
        made = sub.add_parser(name, aliases=list(aliases), parents=parents, **kw)
        made.set_defaults(command=name)   # args.command is the command's own name, whichever was typed
        return made
    command("nodes", ("node",), help="nodes, their state, allocation, potential productivity and what the next "
                                     "backfill fill would do with each")
    explain = command("explain", help="why backfill fills a node or not, with the figures that decide it")
    explain.add_argument("node", help="a node id (gleanctl nodes lists them)")
    vms = command("vms", ("vm",), help="VMs with role, node and age")
    vms.add_argument("--all", action="store_true", help="include ended leases")
    request = command("request", help="place an on-demand VM")
    # no default size: a request that forgot it would place (and maybe preempt for) a VM nobody asked for
    request.add_argument("--vcpus", type=int, required=True)
    request.add_argument("--memory", type=int, required=True, help=f"MiB, at least {checks.MIN_MEMORY_MIB}")
    request.add_argument("--image", default="tiny")
    request.add_argument("--owner", default="admin")
    request.add_argument("--request-id", help="idempotency key (default: a new one)")
    cancel = command("cancel", help="withdraw an on-demand request still waiting for room")
    cancel.add_argument("request_id")
    release = command("release", help="stop a VM and end its lease")
    release.add_argument("lease_id")
    release.add_argument("--force", action="store_true", help="destroy at once, no clean shutdown")
    add_backfill_parser(command("backfill", help="show or change the backfill configuration"), parents)
    reserve = command(
        "reserve", ("reserves",), help="show reserves (per node, and Balancer's: static, predictive, hints, wait "
                                       "window); change only with a verb: `reserve set NODE --vcpus N --memory MIB | "
                                       "--whole-node`, `reserve clear NODE`, `reserve set KEY=VALUE ...` ([reserves] "
                                       "settings), `reserve hint N --in H --for D` / `reserve unhint [--label L]`")
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
    events = command("events", ("event",), help="the audit log")
    events.add_argument("--after", type=int, default=0,
                        help="the events after this sequence number, oldest first (default: the newest)")
    events.add_argument("--limit", type=int, default=50, help="at most this many (the controller caps it at 1000)")
    events.add_argument("--kind", default="", help="one kind, e.g. vm.preempted, request.rejected, node.down "
                                                   "(an unknown one is an error listing them)")
    events.add_argument("-f", "--follow", action="store_true",
                        help="then print new events as they are written, until Ctrl-C")
    command("status", help="pool utilization: allocated and used, foreground versus backfill; tenants")
    add_tenant_parser(command("tenant", ("tenants",), help="tenants and their lower and upper bounds: show, "
                                                           "create, set, delete"), parents)
    pkicmd.add_parser(sub, [global_flags(output_only=True)])
    return parser


def add_backfill_parser(backfill: argparse.ArgumentParser, parents: list) -> None:
    actions = backfill.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser("show", parents=parents, help="the backfill settings in force")
    for name, text in (("set", "change settings now: KEY=VALUE ..."),
                       ("enable", "turn backfill on (and set KEY=VALUE ...)"),
                       ("disable", "turn backfill off (and set KEY=VALUE ...)")):
        action = actions.add_parser(name, parents=parents, help=text, epilog=backfill_keys_help(),
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
        action.add_argument("settings", nargs="+" if name == "set" else "*", metavar="KEY=VALUE")


def add_tenant_parser(tenant: argparse.ArgumentParser, parents: list) -> None:
    actions = tenant.add_subparsers(dest="action", required=True, metavar="ACTION")
    show = actions.add_parser("show", parents=parents, help="every tenant, or one, with its bounds and use")
    show.add_argument("name", nargs="?")
    sizes = "CPUS,MIB: whole numbers, e.g. 4,8192"
    create = actions.add_parser("create", parents=parents, help="a new tenant, admitted if the pool can book it")
    create.add_argument("name", help="the owner name its on-demand VMs are requested under")
    create.add_argument("--kind", required=True, choices=("on-demand", "batch"))
    create.add_argument("--lower", default="0,0", help=f"guaranteed capacity ({sizes}; default 0,0)")
    create.add_argument("--upper", required=True, help=f"the most it may use ({sizes}, at least 1,1)")
    set_ = actions.add_parser("set", parents=parents, help="change a tenant's bounds (the built-in ones' too)")
    set_.add_argument("name")
    set_.add_argument("--lower", help=sizes)
    set_.add_argument("--upper", help=f"{sizes}; `unbounded` for the built-in default and backfill")
    delete = actions.add_parser("delete", parents=parents, help="delete a tenant without live VMs")
    delete.add_argument("name")
    delete.add_argument("--drain", action="store_true", help="release its live VMs first, then delete it")
    goal = actions.add_parser("goal", parents=parents, help="a batch tenant's goal (RHIC): work by a deadline, or "
                              "least cost", description="The controller sizes the tenant each minute: every volunteer "
                              "it is granted, and dedicated VMs within its lower bound when they are needed.")
    goal.add_argument("name")
    goal.add_argument("--work", type=float, metavar="VCPU_HOURS", help="the job's work W, in vCPU-hours")
    goal.add_argument("--deadline", metavar="TIME", help="+Nh, +Nm, +Ns from now, or an ISO 8601 time")
    goal.add_argument("--least-cost", type=float, metavar="PRICE", help="the price of a dedicated vCPU-hour")
    goal.add_argument("--volunteer-price", type=float, default=0.0, metavar="PRICE",
                      help="the price of a volunteer vCPU-hour (least cost; default 0)")
    goal.add_argument("--fixed-cost", type=float, default=0.0, metavar="PRICE",
                      help="a cost per hour the job runs, whatever its size (least cost; default 0)")
    goal.add_argument("--clear", action="store_true", help="drop the goal")
    backfill = actions.add_parser("backfill", parents=parents, help="a batch tenant's own backfill settings (the "
                                  "rest are the pool's)", description=f"KEY: {', '.join(TENANT_BACKFILL_KEYS)}, "
                                  "with the pool-wide settings' bounds (gleanctl backfill set --help)")
    backfill.add_argument("name")
    backfill.add_argument("settings", nargs="*", metavar="KEY=VALUE")
    backfill.add_argument("--reset", action="store_true", help="drop its own settings first (the pool-wide ones again)")


def backfill_keys_help() -> str:
    """Every backfill key with its values and default, from the tables the controller checks
    with (checks.BACKFILL_KEYS, BACKFILL_BOUNDS) and its defaults (BackfillConfig)."""
    defaults = BackfillConfig()
    choices = {"enabled": "true|false", "termination_policy": "|".join(p.value for p in Policy),
               "interruption": "|".join(INTERRUPTIONS), "image": "an image name (the agents' image directory)"}
    lines = ["keys (checked here and by the controller; `backfill show` prints the values in force):"]
    for key in checks.BACKFILL_KEYS:
        if key in checks.BACKFILL_BOUNDS:
            low, high, unit = checks.BACKFILL_BOUNDS[key]
            values = f"{low}..{high}" + (f" {unit}" if unit else "")
        else:
            values = choices[key]
        default = getattr(defaults, key)
        default = json.dumps(default) if isinstance(default, bool) else getattr(default, "value", default)
        lines.append(f"  {key:<24} {values:<40} default {default}")
    return "\n".join(lines)


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line, global flags wherever they stood, their defaults filled in."""
    args = build_parser().parse_args(argv)
    for name, default in GLOBAL_DEFAULTS.items():
        if not hasattr(args, name):
            setattr(args, name, default)
    args.json = args.output == "json"
    return args


COMMANDS: dict[str, Callable] = {"nodes": cmd_nodes, "explain": cmd_explain, "vms": cmd_vms,
                                 "request": cmd_request, "cancel": cmd_cancel, "release": cmd_release,
                                 "backfill": cmd_backfill, "reserve": cmd_reserve, "events": cmd_events,
                                 "status": cmd_status, "tenant": cmd_tenant}


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        check_arguments(args)
    except (ids.InvalidField, checks.SettingError, UsageError) as exc:
        prefix = "invalid argument " if isinstance(exc, ids.InvalidField) else ""
        print(f"gleanctl: {prefix}{exc}", file=sys.stderr)
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
    except NotFound as exc:
        print(f"gleanctl: {exc}", file=sys.stderr)
        return EXIT_NOT_FOUND
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except grpc.RpcError as exc:
        return rpc_failure(exc, args)
    print(json.dumps(data, indent=2, sort_keys=True) if args.json else text)
    return code


def rpc_failure(exc: grpc.RpcError, args: argparse.Namespace) -> int:
    """Say what the controller's error was; its exit code by class (RPC_EXIT)."""
    code = exc.code()
    exit_code = RPC_EXIT.get(code, EXIT_REFUSED)
    if exit_code == EXIT_UNAVAILABLE and code != grpc.StatusCode.RESOURCE_EXHAUSTED:
        where = args.controller or "the controller"
        print(f"gleanctl: cannot reach {where}: {exc.details()}", file=sys.stderr)
    elif exit_code == EXIT_USAGE:
        print(f"gleanctl: invalid argument {exc.details()}", file=sys.stderr)
    else:
        print(f"gleanctl: {code.name.lower().replace('_', ' ')}: {exc.details()}", file=sys.stderr)
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
