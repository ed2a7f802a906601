"""The controller's TOML configuration, checked as strictly as the agent's."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gleaner_common import ids
from gleaner_common.config import (ConfigError, TlsConfig, check_address, check_listen, check_numbers, check_tls,
                                   is_loopback, number_keys, parse_sections, read_toml, sections_to_toml)
from gleaner_common.config import with_overrides as _with_overrides

from .checks import MAX_NODE_CPUS
from .core.records import LedgerSettings
from .intake import IntakeSettings
from .tenants import RBT_RANGE, URR_RANGE
from .core.reserve_settings import ReserveError, ReserveSettings


@dataclass(frozen=True)
class ControllerConfig:
    listen: str = "0.0.0.0:7450"
    state_dir: Path = Path("/var/lib/gleaner/controller")
    log_level: str = "info"
    vm_name_prefix: str = "gleaner-"      # every VM the controller launches is named PREFIX + lease id
    agent_timeout_seconds: float = 30.0   # for launch calls; terminations also get the grace period
    max_agents: int = 256                 # each agent's report stream holds one server thread
    agent_calls: int = 32                 # agent calls running at once, pool-wide (controller.bulkheads)
    agent_calls_per_node: int = 4         # ... to one node (one kept for stops and on-demand launches)
    agent_backfill_backlog: int = 16      # backfill launches one node may have queued or running
    suspect_after_seconds: float = 6.0    # no report for this long: the node is suspect (no new VMs)
    down_after_seconds: float = 20.0      # ... and for this long: down, its VMs lost
    liveness_check_seconds: float = 1.0
    selection_interval_seconds: float = 60.0  # RHIC's evaluation interval
    prediction_window: int = 30           # reports in the foreground CPU moving average
    swap_threshold_cores: float = 0.5     # an unused node must beat a used one by this much to swap in
    churn_burst: int = 3                  # more node arrivals/departures than this in one interval: defer
    use_prediction: bool = True           # cap backfill by potential productivity, not only by allocation
    notice_seconds: int = 30              # a victim's clean-shutdown notice when the new VM starts beside it
    host_headroom_mib: int = 256          # node memory the instant path leaves free
    # [reports]: each node's budget (controller/intake.py) and what one report may adopt
    reports_per_minute: float = 240.0
    report_burst: int = 20
    report_mib_per_minute: float = 8.0
    report_strikes: int = 20
    report_penalty_seconds: float = 10.0
    adoptions_per_report: int = 32
    adoptions_per_hour: int = 256
    retention_days: float = 90.0          # [retention]: ended leases, resolved requests and events
    record_path: Path | None = None       # [record]: the controller's inputs and outcomes (controller/recording.py)
    record_max_mib: int = 256             # ... the file's cap
    metrics_listen: str = "127.0.0.1:9478"   # [metrics]: the Prometheus endpoint ("" turns it off)
    metrics_tls: bool = False                # ... over HTTPS with the controller's certificate
    reserves: ReserveSettings = field(default_factory=ReserveSettings)   # [reserves]: Balancer's reserves
    tenants_rbt: float = 1.0              # [tenants]: PhoenixCloud's booking threshold (controller/tenants.py)
    tenants_urr: float = 1.0              # ... and usage reference; the paper's baseline is 1 and 1
    tls: TlsConfig = field(default_factory=TlsConfig)

    @property
    def store_path(self) -> Path:
        return self.state_dir / "controller.sqlite3"


HOUR, DAY = 3600, 86400

# TOML section -> {key: (ControllerConfig attribute, type[, (low, high)])}: every number has its
# inclusive range, checked (finite) by check_config; a number without one fails at import.
# inf (TOML has it) would leave a waiting state without a deadline, nan would pass any `<= 0`.
_SCHEMA: dict[str, dict[str, tuple]] = {
    "controller": {"listen": ("listen", str), "state_dir": ("state_dir", Path), "log_level": ("log_level", str),
                   "vm_name_prefix": ("vm_name_prefix", str),
                   "agent_timeout_seconds": ("agent_timeout_seconds", float, (1, HOUR)),
                   "max_agents": ("max_agents", int, (1, 100_000)),
                   "agent_calls": ("agent_calls", int, (3, 1024)),
                   "agent_calls_per_node": ("agent_calls_per_node", int, (2, 1023)),
                   "agent_backfill_backlog": ("agent_backfill_backlog", int, (1, 4096))},
    "liveness": {"suspect_after_seconds": ("suspect_after_seconds", float, (0.1, DAY)),
                 "down_after_seconds": ("down_after_seconds", float, (0.1, 7 * DAY)),
                 "check_seconds": ("liveness_check_seconds", float, (0.01, HOUR))},
    "selection": {"interval_seconds": ("selection_interval_seconds", float, (0.1, DAY)),
                  "prediction_window": ("prediction_window", int, (1, 100_000)),
                  "swap_threshold_cores": ("swap_threshold_cores", float, (0, MAX_NODE_CPUS)),
                  "churn_burst": ("churn_burst", int, (0, 1_000_000)),
                  "use_prediction": ("use_prediction", bool)},
    "preemption": {"notice_seconds": ("notice_seconds", int, (0, HOUR)),
                   "host_headroom_mib": ("host_headroom_mib", int, (0, 2**20))},
    "reports": {"per_minute": ("reports_per_minute", float, (1, 600_000)),
                "burst": ("report_burst", int, (1, 100_000)),
                "mib_per_minute": ("report_mib_per_minute", float, (1, 65536)),
                "strikes": ("report_strikes", int, (1, 10_000)),
                "penalty_seconds": ("report_penalty_seconds", float, (0, HOUR)),
                "adoptions_per_report": ("adoptions_per_report", int, (1, 4096)),
                "adoptions_per_hour": ("adoptions_per_hour", int, (1, 1_000_000))},
    "retention": {"days": ("retention_days", float, (1, 36500))},
    "record": {"path": ("record_path", Path), "max_mib": ("record_max_mib", int, (1, 1_048_576))},
    "metrics": {"listen": ("metrics_listen", str), "tls": ("metrics_tls", bool)},
    "tenants": {"rbt": ("tenants_rbt", float, RBT_RANGE), "urr": ("tenants_urr", float, URR_RANGE)},
}
NUMBER_KEYS = number_keys(_SCHEMA)


def ledger_settings(config: ControllerConfig) -> LedgerSettings:
    """The ledger's share of the configuration; the service and the simulator both build theirs here."""
    return LedgerSettings(
        vm_name_prefix=config.vm_name_prefix, suspect_after=config.suspect_after_seconds,
        down_after=config.down_after_seconds, launch_timeout=config.agent_timeout_seconds + 30,
        stop_timeout=config.agent_timeout_seconds + 30, notice_seconds=config.notice_seconds,
        headroom_mib=config.host_headroom_mib, prediction_window=config.prediction_window,
        swap_threshold_cores=config.swap_threshold_cores, churn_burst=config.churn_burst,
        use_prediction=config.use_prediction, adoptions_per_report=config.adoptions_per_report,
        adoptions_per_hour=config.adoptions_per_hour)


def intake_settings(config: ControllerConfig) -> IntakeSettings:
    return IntakeSettings(config.reports_per_minute, config.report_burst, config.report_mib_per_minute,
                          config.report_strikes, config.report_penalty_seconds)


def parse_config(data: dict[str, Any], source: str = "<config>") -> ControllerConfig:
    data = dict(data)
    reserves = parse_reserves(data.pop("reserves", {}), source)
    values, tls = parse_sections(data, _SCHEMA, source)
    return ControllerConfig(**values, reserves=reserves, tls=TlsConfig(**tls))


def parse_reserves(body: Any, source: str) -> ReserveSettings:
    """The [reserves] section (static_nodes, predictive, slot_seconds, utc_offset_seconds,
    wait_seconds, lead_seconds, max_waiting, drain), checked by the reserves' own rules."""
    if not isinstance(body, dict):
        raise ConfigError(f"{source}: [reserves] must be a table")
    try:
        return ReserveSettings.from_dict(body)
    except ReserveError as exc:
        raise ConfigError(f"{source}: reserves.{exc}") from None
    except TypeError as exc:   # a value of the wrong type the dataclass itself refused
        raise ConfigError(f"{source}: [reserves]: {exc}") from None


def load_config(path: Path) -> ControllerConfig:
    return parse_config(read_toml(path), str(path))


def to_toml(config: ControllerConfig) -> str:
    text = sections_to_toml(config, _SCHEMA, config.tls)
    if config.reserves == ReserveSettings():
        return text
    lines = ["[reserves]"] + [f"{key} = {json.dumps(value)}" for key, value in config.reserves.as_dict().items()]
    return text + "\n".join(lines) + "\n"


def check_config(config: ControllerConfig, source: str) -> None:
    check_listen(config.listen, "controller.listen", source)
    check_numbers(config, _SCHEMA, source)
    try:
        ids.vm_name_prefix(config.vm_name_prefix, "controller.vm_name_prefix")
    except ids.InvalidField as exc:
        raise ConfigError(f"{source}: {exc}") from None
    if config.down_after_seconds <= config.suspect_after_seconds:
        raise ConfigError(f"{source}: liveness.down_after_seconds must be longer than suspect_after_seconds")
    check_bulkheads(config, source)
    check_record(config.record_path, source)
    if config.log_level.lower() not in ("debug", "info", "warning", "error"):
        raise ConfigError(f"{source}: controller.log_level must be debug, info, warning or error")
    check_tls(config.tls, config.listen, source)
    check_metrics(config, source)


def check_metrics(config: ControllerConfig, source: str) -> None:
    """[metrics]: HOST:PORT or "" (off). Beyond loopback the pool's figures go out only over HTTPS
    with the controller's certificate: metrics.tls = true, which needs [tls]."""
    if not config.metrics_listen:
        return
    check_address(config.metrics_listen, "metrics.listen", source, port_zero=True)
    host = config.metrics_listen.rpartition(":")[0].strip("[]")
    if config.metrics_tls and config.tls.files is None:
        raise ConfigError(f"{source}: metrics.tls = true needs the controller's certificate ([tls] ca, cert, key)")
    if not config.metrics_tls and not is_loopback(host):
        raise ConfigError(f"{source}: metrics.listen {config.metrics_listen!r} is not loopback: set metrics.tls = "
                          f"true (HTTPS with the controller's certificate), or listen on 127.0.0.1 behind a proxy")


def check_bulkheads(config: ControllerConfig, source: str) -> None:
    """The agent calls' bounds (controller.bulkheads), beyond each key's range: a node never
    takes every thread, and keeps one for stops and on-demand launches."""
    if config.agent_calls_per_node >= config.agent_calls:
        raise ConfigError(f"{source}: controller.agent_calls_per_node ({config.agent_calls_per_node}) must be "
                          f"less than controller.agent_calls ({config.agent_calls}): one node never takes every call")


def check_record(path: Path | None, source: str) -> None:
    """[record] path: an absolute file name in a directory that exists (opened at start)."""
    if path is None:
        return
    if not path.is_absolute():
        raise ConfigError(f"{source}: record.path must be an absolute path, not {str(path)!r}")
    if not path.parent.is_dir():
        raise ConfigError(f"{source}: record.path {str(path)!r}: its directory {str(path.parent)!r} does not exist")
    if path.is_dir():
        raise ConfigError(f"{source}: record.path {str(path)!r} is a directory; name a file in it")


def with_overrides(config: ControllerConfig, listen: str | None = None, insecure: bool = False,
                   source: str = "configuration") -> ControllerConfig:
    return _with_overrides(config, check_config, listen, insecure, source)
