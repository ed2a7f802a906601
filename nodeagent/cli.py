"""gleaner-agent: the node agent daemon.

    gleaner-agent --config /etc/gleaner/agent.toml [--listen ADDR] [--insecure]
"""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

from apscheduler.schedulers.background import BackgroundScheduler
from prometheus_client import CollectorRegistry

from gleaner_common import __version__, watchdog
from gleaner_common.identity import Role
from gleaner_common.logs import log_event, setup_logging
from gleaner_common.metrics import ServerBasics, serve_prometheus
from gleaner_common.pki import PkiError, check_server
from gleaner_common.rpc import reload_on_sighup

from . import crashpoints
from .agent import assemble
from .config import AgentConfig, ConfigError, load_config, with_overrides
from .enforcement import Enforcement
from .events import EventBus
from .host.hypervisor import Hypervisor, HypervisorError
from .host.libvirtconf import LibvirtConfError, check_stdio_handler
from .metrics import PrometheusCollector, Sampler
from .reporter import Reporter
from .server import build_server

log = logging.getLogger("nodeagent")
DENIALS_LOG_SECONDS = 60.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gleaner-agent", description="Gleaner node agent")
    parser.add_argument("--config", type=Path, help="TOML configuration file")
    parser.add_argument("--listen", help="override agent.listen (HOST:PORT or unix:PATH)")
    parser.add_argument("--insecure", action="store_true",
                        help="serve without TLS; only allowed on loopback or a unix socket")
    parser.add_argument("--version", action="version", version=f"gleaner-agent {__version__}")
    return parser.parse_args(argv)


def safely(job, what: str) -> None:
    """Run a periodic job; libvirtd being away is logged and retried at the next run."""
    try:
        job()
    except HypervisorError as exc:
        log_event(log, f"{what}.skipped", logging.WARNING, error=str(exc))


def guard_loop(enforcement: Enforcement, stop: threading.Event) -> None:
    while not stop.wait(enforcement.guard_interval()):
        watchdog.beat("guard", enforcement.guard_interval())
        safely(enforcement.guard_tick, "guard")


def serve_metrics(config: AgentConfig, sampler: Sampler, events: EventBus) -> None:
    """The Prometheus endpoint: the sampler's figures, the agent's own events, and what every
    Gleaner server exports."""
    registry = CollectorRegistry()
    registry.register(PrometheusCollector(sampler, events))
    registry.register(ServerBasics("agent", config.tls.files))
    serve_prometheus(config.metrics_listen, registry)


def run(config: AgentConfig) -> int:
    crashpoints.announce()
    hypervisor = Hypervisor(config.libvirt_uri)
    agent = assemble(config, hypervisor)
    inventory, collection = agent.inventory, agent.collection
    try:
        facts = inventory.host_facts()
        log_event(log, "agent.host", hostname=facts.hostname, cpus=facts.cpus, memory_mib=facts.memory_mib,
                  libvirt=facts.libvirt_version, qemu=facts.qemu_version, domain_type=inventory.domain_type)
    except HypervisorError as exc:  # keep serving: calls answer UNAVAILABLE until libvirtd is back
        log_event(log, "agent.libvirt_unreachable", logging.ERROR, error=str(exc))
    sampler = Sampler(collection.domain_info, lambda: inventory.host_facts().cpus, collection.counters)
    server = build_server(config, agent, sampler)
    if config.metrics_listen:
        serve_metrics(config, sampler, agent.events)
    scheduler = BackgroundScheduler(daemon=True)
    jobs = [(agent.reaper.reap, "reaper", config.reap_interval_seconds),
            (agent.enforcement.reconcile, "reconciler", config.reconcile_interval_seconds),
            (sampler.sample, "sampler", config.metrics_sample_seconds)]
    for job, what, seconds in jobs:
        scheduler.add_job(safely, "interval", args=[job, what], seconds=seconds, id=what,
                          max_instances=1, coalesce=True)
    # Denials are logged once per kind as they happen; repeats show in a summary line a minute.
    scheduler.add_job(server.authorizer.log_denials, "interval", args=[DENIALS_LOG_SECONDS],
                      seconds=DENIALS_LOG_SECONDS, id="denials", max_instances=1, coalesce=True)
    # A restarted agent cleans up what stopped while it was away and re-asserts classes.
    safely(agent.reaper.reap, "reaper")
    safely(agent.enforcement.reconcile, "reconciler")
    scheduler.start()
    stop = threading.Event()
    if config.guard_enabled:  # its own loop: its pace changes with what it sees
        threading.Thread(target=guard_loop, args=(agent.enforcement, stop), name="guard", daemon=True).start()
    if config.controller_address:
        reporter = Reporter(config, inventory, sampler, agent.hibernation)
        threading.Thread(target=reporter.run, args=(stop,), name="reporter", daemon=True).start()
    log_event(log, "agent.serving", listen=config.listen, port=server.port, version=__version__,
              tls="off (insecure, local only)" if config.tls.insecure else "mutual",
              state_dir=str(config.state_dir), image_dir=str(config.image_dir))

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: stop.set())
    reload_on_sighup(server)
    watchdog.ready()  # systemd Type=notify: serving; WATCHDOG=1 while its loops beat
    stop.wait()
    log_event(log, "agent.stopping", note="domains keep running; a restarted agent finds them")
    scheduler.shutdown(wait=False)
    server.stop(grace=5)
    server.authorizer.log_denials(DENIALS_LOG_SECONDS)  # the last window's, not lost with the process
    hypervisor.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        config = load_config(args.config) if args.config else AgentConfig()
        config = with_overrides(config, listen=args.listen, insecure=args.insecure,
                                source=str(args.config or "defaults"))
    except ConfigError as exc:
        print(f"gleaner-agent: {exc}", file=sys.stderr)
        return 2
    try:   # console logs are bounded only through virtlogd
        check_stdio_handler(config.libvirt_uri)
    except LibvirtConfError as exc:
        print(f"gleaner-agent: {exc}", file=sys.stderr)
        return 2
    setup_logging(config.log_level)
    try:
        # a certificate for another node or role would be refused by everyone; a bad deny list is named here
        check_server(config.tls.files, config.tls.deny_list, Role.AGENT, config.agent_id)
    except PkiError as exc:
        print(f"gleaner-agent: {exc}", file=sys.stderr)
        return 2
    try:
        return run(config)
    except (OSError, RuntimeError) as exc:
        log_event(log, "agent.failed", logging.ERROR, error=str(exc))
        return 1


if __name__ == "__main__":
    sys.exit(main())
