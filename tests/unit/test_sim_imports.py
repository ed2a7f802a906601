"""The simulator is pure: importing it loads no gRPC, SQLite, libvirt or netlink code, and the
settings it shares with the live controller come from one place."""
from __future__ import annotations

import typing
from collections.abc import Mapping

from tests.agentproc import modules_loaded_by

HEAVY = ("grpc", "sqlite3", "libvirt", "pyroute2")


def test_importing_the_simulator_cli_loads_no_grpc_sqlite_libvirt_or_pyroute2():
    assert modules_loaded_by(["controller.sim.cli"], HEAVY) == []


def test_gleanctl_service_and_simulator_share_one_parser_and_one_ledger_settings():
    from controller import checks, config, gleanctl, service
    from controller.sim import cli
    assert gleanctl.parse_backfill_setting is checks.parse_backfill_setting
    assert service.ledger_settings is config.ledger_settings is cli.ledger_settings
    assert not hasattr(gleanctl, "BACKFILL_KEYS")   # the keys live beside the parser


def test_simulator_backfill_settings_parse_as_gleanctl_does():
    from controller.sim import cli
    backfill = cli.backfill_config(["enabled=yes", "max_instances=3", "termination_policy=least_loss"])
    assert (backfill.enabled, backfill.max_instances, backfill.termination_policy.value) == \
        (True, 3, "least_loss")


def test_the_services_node_figures_are_read_only_mappings():
    from controller.service import PoolService
    for name in ("productivity", "predicted"):
        hint = typing.get_type_hints(getattr(PoolService, name).fget)["return"]
        assert typing.get_origin(hint) is Mapping, (name, hint)
