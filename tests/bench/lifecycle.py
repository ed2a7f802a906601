"""Launch-to-ready and graceful-terminate times of real QEMU guests through the agent.

    python -m tests.bench.lifecycle [--runs 10]

One agent (the test harness's settings: grace_seconds 10) launches a 1-vCPU, 128 MiB guest of
the tiny image, waits until it is ready, terminates it gracefully, and repeats. All times are
taken by this client with time.monotonic(), except the one marked as the agent's own.

- launch_rpc: the LaunchDomain call alone, until its reply arrives (the agent has made the
  overlay, defined and started the domain; the guest has not booted yet).
- launch_to_ready: from the LaunchDomain call until the guest's GLEANER-READY line is found in
  its serial console log file. The file is read every 50 ms, so this may be late by up to that
  (plus the read itself); it includes launch_rpc.
- graceful_terminate: from the TerminateDomain call of a ready guest until the domain is gone
  from libvirt (looked up by name through libvirt-python on a connection of this client) AND its
  overlay file (state_dir/overlays/NAME.qcow2) is gone, both polled every 5 ms while the call
  runs: ACPI power button, the guest's clean power-off, undefine, overlay removal, and the
  round trip. It may be late by up to one poll (5 ms plus a libvirt lookup). A run whose
  outcome is not a clean shutdown fails the benchmark.
- terminate_rpc: the same call, until this client sees its reply (after the agent's undefine and
  overlay removal, plus the reply's trip back; seen by the same 5 ms poll, so late by up to that).
- agent_reported_terminate: the reply's duration_seconds, the agent's own timer: from after it
  looked the domain up until the domain stopped. It leaves out the undefine, the overlay
  removal, the lookup and both network trips.

Left out everywhere: the controller (none runs), the time libvirtd takes to report events, and
anything after the overlay is gone (console log files stay until the agent's state is removed).
Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import libvirt

from protos import agent_pb2
from tests.agentproc import (LIBVIRT_URI, AgentProcess, LabEnv, exit_cleanly_on_sigterm, launch_request,
                             remove_test_domains, unique_name, wait_for_console)

POLL_SECONDS = 0.005
TERMINATE_TIMEOUT = 120.0


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"p50": round(statistics.median(ordered), 3), "min": round(ordered[0], 3),
            "max": round(ordered[-1], 3), "mean": round(statistics.fmean(ordered), 3)}


def in_libvirt(conn: libvirt.virConnect, name: str) -> bool:
    try:
        conn.lookupByName(name)
        return True
    except libvirt.libvirtError as exc:
        if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
            return False
        raise


def timed_terminate(stub, conn: libvirt.virConnect, name: str, overlay: Path):
    """(seconds until the domain and its overlay are gone, seconds until the reply, reply)."""
    started = time.monotonic()
    future = stub.TerminateDomain.future(agent_pb2.TerminateDomainRequest(name=name))
    gone_at = replied_at = None
    domain_gone = False
    while gone_at is None or replied_at is None:
        now = time.monotonic()
        if replied_at is None and future.done():
            replied_at = now
            future.result()  # an RPC error ends the benchmark here
        if gone_at is None:
            domain_gone = domain_gone or not in_libvirt(conn, name)
            if domain_gone and not overlay.exists():
                gone_at = time.monotonic()
        if now - started > TERMINATE_TIMEOUT:
            raise SystemExit(f"{name}: not gone from libvirt and disk within {TERMINATE_TIMEOUT:g}s "
                             f"(domain gone: {domain_gone}, overlay exists: {overlay.exists()})")
        time.sleep(POLL_SECONDS)
    return gone_at - started, replied_at - started, future.result()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args(argv)
    exit_cleanly_on_sigterm()
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)  # lookups of a gone domain are expected
    env = LabEnv.create()
    agent = AgentProcess(env, name="bench")
    conn = None
    launch_rpc, ready, terminate, terminate_rpc, agent_terminate = [], [], [], [], []
    try:
        agent.start()
        conn = libvirt.open(LIBVIRT_URI)
        stub = agent.stub()
        for run in range(args.runs):
            name = unique_name("bench")
            overlay = agent.state_dir / "overlays" / f"{name}.qcow2"
            started = time.monotonic()
            reply = stub.LaunchDomain(launch_request(name))
            launch_rpc.append(time.monotonic() - started)
            wait_for_console(reply.domain.console_log, "GLEANER-READY", timeout=120)
            ready.append(time.monotonic() - started)
            if not overlay.exists() or not in_libvirt(conn, name):
                raise SystemExit(f"run {run}: {name} has no overlay at {overlay} or is not in libvirt; "
                                 "the terminate timer would measure nothing")
            gone, replied, result = timed_terminate(stub, conn, name, overlay)
            if result.outcome != agent_pb2.TERMINATION_OUTCOME_CLEAN_SHUTDOWN:
                raise SystemExit(f"run {run}: terminate was not clean: {result.detail}")
            terminate.append(gone)
            terminate_rpc.append(replied)
            agent_terminate.append(result.duration_seconds)
            print(f"run {run + 1}/{args.runs}: ready {ready[-1]:.2f}s, terminate {gone:.3f}s "
                  f"(reply {replied:.3f}s, agent's timer {result.duration_seconds:.3f}s)", file=sys.stderr, flush=True)
    finally:
        if conn is not None:
            conn.close()
        agent.stop()
        remove_test_domains()
        env.remove()
    s_launch, s_ready, s_term = summary(launch_rpc), summary(ready), summary(terminate)
    s_term_rpc, s_agent = summary(terminate_rpc), summary(agent_terminate)
    print(json.dumps({"runs": args.runs, "domain_type": "qemu", "guest_vcpus": 1, "guest_memory_mib": 128,
                      "launch_rpc_p50_s": s_launch["p50"], "launch_to_ready_p50_s": s_ready["p50"],
                      "graceful_terminate_p50_s": s_term["p50"], "terminate_rpc_p50_s": s_term_rpc["p50"],
                      "agent_reported_terminate_p50_s": s_agent["p50"], "launch_rpc_s": s_launch,
                      "launch_to_ready_s": s_ready, "graceful_terminate_s": s_term, "terminate_rpc_s": s_term_rpc,
                      "agent_reported_terminate_s": s_agent,
                      "ready_poll_s": 0.05, "terminate_poll_s": POLL_SECONDS}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
