"""Launch-to-ready and graceful-terminate times of real QEMU guests through the agent.

    python -m tests.bench.lifecycle [--runs 10]

Prints one JSON object. "ready" is the guest's GLEANER-READY line on its serial console,
timed from the LaunchDomain call; "terminate" is the TerminateDomain call of a ready guest
(ACPI power button, clean power-off, undefine, overlay removed).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from protos import agent_pb2
from tests.agentproc import (AgentProcess, LabEnv, exit_cleanly_on_sigterm, launch_request, remove_test_domains, unique_name,
                             wait_for_console)


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"p50": round(statistics.median(ordered), 3), "min": round(ordered[0], 3),
            "max": round(ordered[-1], 3), "mean": round(statistics.fmean(ordered), 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args(argv)
    exit_cleanly_on_sigterm()
    env = LabEnv.create()
    agent = AgentProcess(env, name="bench").start()
    launch_rpc, ready, terminate = [], [], []
    try:
        stub = agent.stub()
        for run in range(args.runs):
            name = unique_name("bench")
            started = time.monotonic()
            reply = stub.LaunchDomain(launch_request(name))
            launch_rpc.append(time.monotonic() - started)
            wait_for_console(reply.domain.console_log, "GLEANER-READY", timeout=120)
            ready.append(time.monotonic() - started)
            result = stub.TerminateDomain(agent_pb2.TerminateDomainRequest(name=name))
            if result.outcome != agent_pb2.TERMINATION_OUTCOME_CLEAN_SHUTDOWN:
                raise SystemExit(f"run {run}: terminate was not clean: {result.detail}")
            terminate.append(result.duration_seconds)
            print(f"run {run + 1}/{args.runs}: ready {ready[-1]:.2f}s, terminate {terminate[-1]:.2f}s",
                  file=sys.stderr, flush=True)
    finally:
        agent.stop()
        remove_test_domains()
        env.remove()
    s_launch, s_ready, s_term = summary(launch_rpc), summary(ready), summary(terminate)
    print(json.dumps({"runs": args.runs, "domain_type": "qemu", "guest_vcpus": 1, "guest_memory_mib": 128,
                      "launch_rpc_p50_s": s_launch["p50"], "launch_to_ready_p50_s": s_ready["p50"],
                      "graceful_terminate_p50_s": s_term["p50"], "launch_rpc_s": s_launch,
                      "launch_to_ready_s": s_ready, "graceful_terminate_s": s_term}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
