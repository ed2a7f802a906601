"""Every number in every setting is finite and within explicit bounds (issue 23, item 7): the
agent's and the controller's config files (every number key, enumerated from their schemas, so a
new key is covered by itself), [reserves], the backfill and reserve settings gleanctl sends, and
the daemons and gleanctl as real processes, which also name a file that is not UTF-8.

NaN passes any `value <= 0` check: with report_seconds = nan an agent flooded its controller, with
reap_interval_seconds = nan or inf the agent died at start with a traceback, and the controller
took swap_threshold_cores = nan."""
from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
from pathlib import Path

import pytest

from controller import checks
from controller import config as controller_config
from controller.core.records import BackfillConfig
from controller.core.reserve_settings import NUMBER_RANGES, ReserveSettings
from gleaner_common.config import ConfigError, _number, number_keys
from gleaner_common.ids import InvalidField
from nodeagent import config as agent_config
from tests.agentproc import REPO

TLS = '[tls]\nca = "/pki/ca.pem"\ncert = "/pki/s.pem"\nkey = "/pki/s.key"\n'
CONFIGS = {"agent": agent_config, "controller": controller_config}


def toml_number(value: float) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(value)


def refused_values(kind: type, low: float, high: float) -> list[float]:
    """NaN, both infinities, below the range (0 and negative where they are not allowed) and
    above it."""
    below = [low - 1] if kind is int else [low / 2 if low > 0 else -1.0]
    if low > 0:
        below.append(kind(0))
    if low >= 0:
        below.append(-kind(1))
    return [math.nan, math.inf, -math.inf, *below, high + 1 if kind is int else high * 2 + 1]


def shown(value: float) -> str:
    """A value as the error shows it."""
    return toml_number(value) if not math.isfinite(value) else _number(value)


def number_cases(module) -> list[tuple[str, type, float, float, float]]:
    """(section.key, its type, low, high, a refused value) for every number key of the schema."""
    cases = []
    for key, (attr, (low, high)) in module.NUMBER_KEYS.items():
        kind = {f.name: f.type for f in dataclasses.fields(module.AgentConfig if module is agent_config
                                                          else module.ControllerConfig)}[attr]
        kind = int if kind == "int" else float
        cases += [(key, kind, low, high, value) for value in dict.fromkeys(refused_values(kind, low, high))]
    return cases


def test_every_number_of_each_config_has_a_range_and_its_default_is_within_it():
    for module, dataclass in ((agent_config, agent_config.AgentConfig), (controller_config,
                                                                         controller_config.ControllerConfig)):
        numbers = {f.name for f in dataclasses.fields(dataclass) if f.type in ("int", "float")}
        assert {attr for attr, _ in module.NUMBER_KEYS.values()} == numbers   # every number is settable, bounded
        defaults = dataclass()
        for key, (attr, (low, high)) in module.NUMBER_KEYS.items():
            assert low <= getattr(defaults, attr) <= high, key
    numbers = {f.name for f in dataclasses.fields(ReserveSettings) if f.type in ("int", "float")}
    assert set(NUMBER_RANGES) == numbers
    with pytest.raises(TypeError, match="s.k is a number without a"):   # a new key without a range
        number_keys({"s": {"k": ("k", float)}})


def test_the_readme_shows_every_number_key_with_its_range():
    readme = (REPO / "README.md").read_text()
    for module in CONFIGS.values():
        for key, (_attr, (low, high)) in module.NUMBER_KEYS.items():
            row = next((line for line in readme.splitlines() if line.startswith(f"| `{key}` |")), "")
            assert row.split("|")[3].strip().startswith(f"{_number(low)}..{_number(high)}"), (key, row)


@pytest.mark.parametrize("which", CONFIGS)
def test_every_number_key_refuses_nan_infinities_and_out_of_range_values_naming_file_key_value_range(
        tmp_path, which):
    module = CONFIGS[which]
    path = tmp_path / f"{which}.toml"
    cases = number_cases(module)
    assert len(cases) >= 5 * len(module.NUMBER_KEYS)
    for key, kind, low, high, value in cases:
        section, name = key.split(".")
        path.write_text(f"[{section}]\n{name} = {toml_number(value)}\n{TLS}")
        with pytest.raises(ConfigError) as err:
            module.with_overrides(module.load_config(path), source=str(path))
        message = str(err.value)
        assert message.startswith(f"{path}: {key}"), message
        assert f"{_number(low)}..{_number(high)}" in message and message.endswith(shown(value)), message


def test_the_boundaries_themselves_are_taken(tmp_path):
    """Low and high of every key pass on their own (unless a rule between two keys says no)."""
    for which, module in CONFIGS.items():
        path = tmp_path / f"{which}.toml"
        for key, (attr, (low, high)) in module.NUMBER_KEYS.items():
            section, name = key.split(".")
            for value in (low, high):
                path.write_text(f"[{section}]\n{name} = {value!r}\n{TLS}")
                try:
                    module.with_overrides(module.load_config(path), source=str(path))
                except ConfigError as exc:
                    assert "must be within" not in str(exc) and "expected" not in str(exc), str(exc)


@pytest.mark.parametrize("key", NUMBER_RANGES)
def test_every_reserves_number_refuses_nan_infinities_and_out_of_range(key):
    kind, low, high = NUMBER_RANGES[key]
    for value in dict.fromkeys(refused_values(kind, low, high)):
        with pytest.raises(ConfigError) as err:
            controller_config.parse_config({"reserves": {key: value}}, "/etc/gleaner/controller.toml")
        message = str(err.value)
        assert message.startswith(f"/etc/gleaner/controller.toml: reserves.{key}: must be "), message
        assert f"{_number(low)}..{_number(high)}" in message and message.endswith(repr(value)), message
        # and as `gleanctl reserve set` and the controller's own check take it
        with pytest.raises((checks.SettingError, InvalidField)) as err:
            checks.parse_reserve_setting(f"{key}={value}")
        assert key in str(err.value)
        with pytest.raises(InvalidField) as err:
            checks.reserve_settings(ReserveSettings(), {key: value})
        assert err.value.field == key and f"{_number(low)}..{_number(high)}" in str(err.value)


BACKFILL_NUMBERS = [key for key, kind in checks.BACKFILL_KEYS.items() if kind is int]


@pytest.mark.parametrize("key", BACKFILL_NUMBERS)
def test_every_backfill_number_refuses_nan_infinities_negatives_and_too_large(key):
    for text in ("nan", "inf", "-inf", "1e3", "-1"):   # whole numbers only, never below 0
        with pytest.raises(checks.SettingError, match=key):
            checks.parse_backfill_setting(f"{key}={text}")
    with pytest.raises(InvalidField) as err:   # above its bound: the controller's check, whoever sends it
        checks.backfill(BackfillConfig(), {key: 10**12})
    assert err.value.field == key and "is outside" in str(err.value)


def test_hints_and_requests_refuse_nan_and_infinities():
    for value in (math.nan, math.inf, -math.inf):
        for field, args in (("in_hours", (1, value, 1.0, "")), ("for_hours", (1, 1.0, value, ""))):
            with pytest.raises(InvalidField) as err:
                checks.hint(*args)
            assert err.value.field == field


# -- the real processes -------------------------------------------------------------------------

def run(module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("module, section, key, value, says", [
    ("nodeagent", "controller", "report_seconds", "nan", "controller.report_seconds must be within 0.1..3600"),
    ("nodeagent", "lifecycle", "reap_interval_seconds", "inf",
     "lifecycle.reap_interval_seconds must be within 0.1..3600"),
    ("nodeagent", "lifecycle", "reap_interval_seconds", "nan",
     "lifecycle.reap_interval_seconds must be within 0.1..3600"),
    ("controller", "selection", "swap_threshold_cores", "nan",
     "selection.swap_threshold_cores must be within 0..4096"),
    ("controller", "liveness", "check_seconds", "-inf", "liveness.check_seconds must be within 0.01..3600"),
])
def test_the_daemons_refuse_such_numbers_at_start_as_a_config_error(tmp_path, module, section, key, value, says):
    path = tmp_path / f"{module}.toml"
    path.write_text(f"[{section}]\n{key} = {value}\n{TLS}")
    done = run(module, "--config", str(path))
    assert done.returncode == 2, done.stderr
    assert f"{path}: {says} (a finite number), not {value}" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("command", [["nodeagent"], ["controller"], ["controller.gleanctl", "nodes"]])
def test_a_config_that_is_not_utf8_is_a_config_error_naming_the_file(tmp_path, command):
    path = tmp_path / "latin1.toml"
    path.write_bytes(b"# gleaner\n[tls]\nca = \"/pki/caf\xe9.pem\"\n")   # Latin-1, as an old editor saves it
    module, *rest = command
    done = run(module, "--config", str(path), *rest)
    assert done.returncode == 2, done.stderr
    assert f"{path}: not valid TOML: not UTF-8 (byte 0xe9 at line 3" in done.stderr
    assert "Traceback" not in done.stderr
    path.write_text("[tls]\nca = \n")   # and TOML errors name the line
    done = run(module, "--config", str(path), *rest)
    assert done.returncode == 2 and f"{path}: not valid TOML:" in done.stderr and "line 2" in done.stderr
    assert "Traceback" not in done.stderr
