"""The agent's own CPU use while it manages 20 running domains, sampling every second.

    python -m tests.bench.agent_overhead [--domains 20] [--seconds 60]

Half the domains are volunteers, so the starvation guard (every 0.25 s), the reconciler
(every 10 s), the reaper and the metrics sampler (every second) all have work. The
agent's CPU time is read from outside (psutil on its process), over a window that starts
once every domain is running. Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import psutil

from protos import agent_pb2
from tests.agentproc import (AgentProcess, LabEnv, exit_cleanly_on_sigterm, launch_request, remove_test_domains,
                             unique_name, wait_for_console)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domains", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args(argv)
    exit_cleanly_on_sigterm()
    env = LabEnv.create()
    agent = AgentProcess(env, name="bench-overhead", settings=dict(
        log_level="info", reconcile_interval_seconds=10.0, metrics_sample_seconds=1.0, guard_tick_seconds=0.25))
    agent.start()
    try:
        stub = agent.stub()
        # One after another, and all in the foreground class until they are up: idle TCG
        # guests are not cheap, and a volunteer booting at idle priority on a host the others
        # already saturate would take minutes. The steady state measured is the same.
        names = []
        for i in range(args.domains):
            role = agent_pb2.ROLE_VOLUNTEER if i % 2 else agent_pb2.ROLE_FOREGROUND
            names.append((unique_name(f"ovh{i}"), role))
            reply = stub.LaunchDomain(launch_request(names[-1][0], role, memory_mib=128))
            if role == agent_pb2.ROLE_VOLUNTEER:
                stub.SetDomainClass(agent_pb2.SetDomainClassRequest(name=names[-1][0],
                                                                    priority_class=agent_pb2.ROLE_FOREGROUND))
            wait_for_console(reply.domain.console_log, "GLEANER-READY", timeout=180)
            print(f"domain {i + 1}/{args.domains} ready", file=sys.stderr, flush=True)
        for name, role in names:
            stub.SetDomainClass(agent_pb2.SetDomainClassRequest(name=name, priority_class=role))
        running = sum(d.state == agent_pb2.DOMAIN_STATE_RUNNING
                      for d in stub.ListDomains(agent_pb2.ListDomainsRequest()).domains)
        if running != args.domains:
            raise SystemExit(f"only {running} of {args.domains} domains are running")
        time.sleep(5)  # let launch work settle out of the window
        process = psutil.Process(agent.process.pid)
        snap_before = stub.GetMetrics(agent_pb2.GetMetricsRequest())
        cpu0, t0 = process.cpu_times(), time.monotonic()
        time.sleep(args.seconds)
        cpu1, t1 = process.cpu_times(), time.monotonic()
        snap = stub.GetMetrics(agent_pb2.GetMetricsRequest())
        rss = process.memory_info().rss
    finally:
        agent.stop()
        remove_test_domains()
        env.remove()
    if len(snap.domains) != args.domains:  # a figure for an agent that samples nothing means nothing
        raise SystemExit(f"the agent's metrics cover {len(snap.domains)} of {args.domains} domains")
    used = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
    print(json.dumps({
        "agent_cpu_percent": round(used / (t1 - t0) * 100, 3),
        "agent_self_reported_cpu_percent": round(snap.agent_cpu_percent, 3),
        "domains": args.domains, "domains_in_metrics": len(snap.domains), "seconds": round(t1 - t0, 1),
        "agent_rss_mib": round(rss / 2**20, 1), "host_busy_cores": round(snap.host.cpu_busy_cores, 2),
        "metrics_interval_s": round(snap_before.interval_seconds, 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
