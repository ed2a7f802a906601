"""gleaner-controller: the pool's controller process."""
from __future__ import annotations

import argparse
import gc
import logging
import signal
import sys
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from wsgiref.simple_server import WSGIServer

from apscheduler.schedulers.background import BackgroundScheduler

from gleaner_common import __version__, watchdog
from gleaner_common.config import ConfigError
from gleaner_common.identity import Role
from gleaner_common.logs import log_event, setup_logging
from gleaner_common.metrics import ServerBasics, serve_prometheus
from gleaner_common.pki import PkiError, check_server
from gleaner_common.rpc import RunningServer, reload_on_sighup

from .agents import AgentLinks
from .config import ControllerConfig, load_config, with_overrides
from .core.goal_sizing import GOAL_INTERVAL_S
from .core.records import BackfillConfig
from .server import build_server
from .service import PoolService
from .store import Store, StoreError

log = logging.getLogger("controller")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gleaner-controller", description="Gleaner controller")
    parser.add_argument("--config", type=Path, help="TOML configuration file")
    parser.add_argument("--listen", help="override controller.listen (HOST:PORT or unix:PATH)")
    parser.add_argument("--insecure", action="store_true",
                        help="serve without TLS; only allowed on loopback or a unix socket")
    parser.add_argument("--version", action="version", version=f"gleaner-controller {__version__}")
    return parser.parse_args(argv)


def logged(job, what: str):
    def run() -> None:
        try:
            job()
        except Exception as exc:  # noqa: BLE001 - a periodic job must survive one bad run
            log_event(log, f"{what}.failed", logging.ERROR, error=f"{type(exc).__name__}: {exc}")
    return run


def evaluate(pool: PoolService) -> None:
    """The end of an evaluation interval: select afresh, then move the long-lived books out of
    the cyclic garbage collector's way (gc.freeze), whose full passes over a pool of 100,000
    VMs would otherwise stall a decision for 100 ms or more. Refcounting still frees them."""
    pool.select(evaluation=True)
    gc.freeze()


DENIALS_AUDIT_SECONDS = 60.0
# At most 257 denial rows a minute (authz.DenialCounter), and only the newest this many kept: weeks
# of ordinary denials, about 40 minutes of the worst flood.
DENIAL_ROWS_KEPT = 10_000
HISTORY_SAVE_SECONDS = 3600.0
PRUNE_SECONDS = 3600.0   # retention ([retention] days): ended leases, resolved requests, events


def audit_denials(pool: PoolService, server: RunningServer, keep: int = DENIAL_ROWS_KEPT) -> None:
    """Denied calls since the last run, one audit event per (identity, method, reason) with its
    count: a flood of denials costs the audit log a bounded number of rows a minute, and the
    oldest denial rows beyond `keep` are pruned in the same transaction."""
    rows = [dict(identity=who, method=method, reason=why, count=count, window_s=DENIALS_AUDIT_SECONDS)
            for who, method, why, count in server.authorizer.denials.flush()]
    if rows:
        pool.store.record_bounded("rpc.denied", rows, keep)


@dataclass
class RunningController:
    pool: PoolService
    server: RunningServer
    scheduler: BackgroundScheduler
    metrics: WSGIServer | None = None   # the Prometheus endpoint ([metrics] listen)

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def metrics_port(self) -> int | None:
        return self.metrics.server_address[1] if self.metrics else None

    def stop(self) -> None:
        if self.metrics is not None:
            self.metrics.shutdown()
            self.metrics.server_close()
        self.scheduler.shutdown(wait=False)
        audit_denials(self.pool, self.server)
        self.pool.save_history()
        self.server.stop(grace=5)
        self.pool.close()
        self.pool.store.close()


def start_controller(config: ControllerConfig) -> RunningController:
    """The store, the pool, the gRPC server and the periodic jobs, all started."""
    store = Store(config.store_path, exclusive=True)
    pool = PoolService(config, store, AgentLinks(config.tls.files, config.agent_timeout_seconds))
    gc.freeze()  # the leases just loaded: see evaluate()
    scheduler = BackgroundScheduler(daemon=True)
    backfill = pool.backfill
    # max_instances=2: a fill asked for while one runs enters, sees it, and makes the running one go round again.
    scheduler.add_job(logged(pool.fill, "backfill"), "interval", seconds=backfill.retry_seconds, id="backfill",
                      max_instances=2, coalesce=True, next_run_time=datetime.now())
    scheduler.add_job(logged(watchdog.beating(pool.tick, "scheduler", config.liveness_check_seconds), "liveness"), "interval", seconds=config.liveness_check_seconds,
                      id="liveness", max_instances=1, coalesce=True)
    # goal-driven tenants sized at even times, not in fills (which come right after dips)
    scheduler.add_job(logged(pool.size_goals, "goals"), "interval", seconds=GOAL_INTERVAL_S, id="goals",
                      max_instances=1, coalesce=True)
    scheduler.add_job(logged(lambda: evaluate(pool), "selection"), "interval",
                      seconds=config.selection_interval_seconds, id="selection", max_instances=1, coalesce=True)

    def fill_now() -> None:
        job = scheduler.get_job("backfill")
        if job is not None:
            job.modify(next_run_time=datetime.now())

    def backfill_changed(new: BackfillConfig) -> None:
        scheduler.reschedule_job("backfill", trigger="interval", seconds=new.retry_seconds)
        fill_now()

    pool.on_fill_wanted = fill_now
    server = build_server(config, pool, backfill_changed)
    # The predictive reserve's history: losing the last hour of it in a crash costs little.
    scheduler.add_job(logged(pool.save_history, "history"), "interval", seconds=HISTORY_SAVE_SECONDS, id="history",
                      max_instances=1, coalesce=True)
    scheduler.add_job(logged(pool.prune, "retention"), "interval", seconds=PRUNE_SECONDS, id="retention",
                      max_instances=1, coalesce=True, next_run_time=datetime.now() + timedelta(seconds=60))
    scheduler.add_job(logged(lambda: audit_denials(pool, server), "denials"), "interval",
                      seconds=DENIALS_AUDIT_SECONDS, id="denials", max_instances=1, coalesce=True)
    scheduler.start()
    metrics = None
    if config.metrics_listen:
        pool.metrics.registry.register(ServerBasics("controller", config.tls.files))
        metrics = serve_prometheus(config.metrics_listen, pool.metrics.registry,
                                   config.tls.files if config.metrics_tls else None)
    log_event(log, "controller.serving", listen=config.listen, port=server.port, version=__version__,
              tls="off (insecure, local only)" if config.tls.insecure else "mutual", store=str(config.store_path),
              backfill="on" if backfill.enabled else "off")
    return RunningController(pool, server, scheduler, metrics)


def run(config: ControllerConfig) -> int:
    running = start_controller(config)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: stop.set())
    reload_on_sighup(running.server)
    watchdog.ready()  # systemd Type=notify: serving; WATCHDOG=1 while its loops beat
    stop.wait()
    log_event(log, "controller.stopping", note="VMs keep running; a restarted controller takes its leases back")
    running.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        config = load_config(args.config) if args.config else ControllerConfig()
        config = with_overrides(config, listen=args.listen, insecure=args.insecure,
                                source=str(args.config or "defaults"))
    except ConfigError as exc:
        print(f"gleaner-controller: {exc}", file=sys.stderr)
        return 2
    setup_logging(config.log_level)
    try:
        # agents and admins would refuse any other identity; a bad deny list is named here
        check_server(config.tls.files, config.tls.deny_list, Role.CONTROLLER)
    except PkiError as exc:
        print(f"gleaner-controller: {exc}", file=sys.stderr)
        return 2
    try:
        return run(config)
    except (OSError, RuntimeError, StoreError) as exc:
        log_event(log, "controller.failed", logging.ERROR, error=str(exc))
        return 1


if __name__ == "__main__":
    sys.exit(main())
