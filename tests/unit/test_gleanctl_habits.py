"""gleanctl with kubectl's and virsh's habits (issue 27, item 4), against a real controller process
with mutual TLS (no agent, no libvirt): global flags anywhere and -o, --version, the
configuration file found where admins put it, one exit code per class of error, singular
aliases and "did you mean"."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from controller import gleanctl as gleanctl_module
from protos import controller_pb2
from tests.agentproc import REPO, LabEnv, free_port
from tests.controllerproc import ControllerProcess


@pytest.fixture(scope="module")
def controller(tmp_path_factory):
    env = LabEnv.in_dir(tmp_path_factory.mktemp("gleanctl-habits"))
    proc = ControllerProcess(env, name="habits-ctl").start()
    yield proc
    proc.stop()


def clean_env(**more: str) -> dict[str, str]:
    """The environment without any gleanctl configuration of the machine's: an empty home."""
    env = {k: v for k, v in os.environ.items() if k not in ("GLEANER_CONFIG", "XDG_CONFIG_HOME", "HOME")}
    return {**env, **more}


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "controller.gleanctl", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env=env)


def gleanctl(controller: ControllerProcess, *args: str, tls=None) -> subprocess.CompletedProcess:
    return run(*controller.gleanctl_args(tls), "--timeout", "20", *args)


def backfill(controller: ControllerProcess) -> controller_pb2.BackfillConfig:
    return controller.stub().GetBackfill(controller_pb2.GetBackfillRequest(), timeout=10)


# -- 1. global flags anywhere, -o -------------------------------------------------------------

def test_global_flags_work_after_the_command_and_o_json_is_json(controller):
    before = gleanctl(controller, "--json", "backfill", "show")
    assert before.returncode == 0, before.stderr
    want = json.loads(before.stdout)
    for args in (["backfill", "show", "--json"], ["backfill", "show", "-o", "json"], ["-o", "json", "backfill", "show"],
                 ["backfill", "--output", "json", "show"]):
        done = gleanctl(controller, *args)
        assert done.returncode == 0, (args, done.stderr)
        assert json.loads(done.stdout) == want, args
    table = gleanctl(controller, "backfill", "show", "-o", "table")
    assert table.returncode == 0 and "max_instances = " in table.stdout
    # every connection flag after the command, too: nothing before it
    done = run("status", *controller.gleanctl_args(), "--timeout", "20", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["backfill_enabled"] is False
    done = gleanctl(controller, "status", "-o", "yaml")
    assert done.returncode == 2 and "invalid choice: 'yaml'" in done.stderr and "table, json" in done.stderr


def test_a_flag_given_before_the_command_is_not_undone_by_the_command(controller):
    """The command's copy of a global flag must not reset one given before it to its default."""
    done = run("--json", *controller.gleanctl_args(), "status")
    assert done.returncode == 0 and isinstance(json.loads(done.stdout), dict), done.stderr
    done = run("--controller", f"127.0.0.1:{free_port()}", "--timeout", "2", "status",
               *controller.gleanctl_args()[2:])   # the controller named before the command only: unreachable
    assert done.returncode == 5, done.stderr


# -- 2. --version -----------------------------------------------------------------------------

def test_version_names_the_package_and_the_protocol():
    done = run("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"gleanctl {metadata.version('gleaner')} (protocol gleaner.controller.v1)"
    assert controller_pb2.DESCRIPTOR.package == "gleaner.controller.v1"


# -- 3. configuration discovery ---------------------------------------------------------------

def write_config(path: Path, controller: ControllerProcess, address: str | None = None) -> Path:
    tls = controller.env.pki.admin
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'[gleanctl]\ncontroller = "{address or controller.address}"\n'
                    f'[tls]\nca = "{tls.ca}"\ncert = "{tls.cert}"\nkey = "{tls.key}"\n')
    return path


def test_config_is_found_by_flag_then_environment_then_home(controller, tmp_path):
    home = tmp_path / "home"
    good = write_config(tmp_path / "good.toml", controller)
    dead = write_config(tmp_path / "dead.toml", controller, f"127.0.0.1:{free_port()}")   # nobody listens there
    def status(*args: str, **env: str) -> subprocess.CompletedProcess:
        return run(*args, "--timeout", "3", "status", env=clean_env(HOME=str(home), **env))
    # the home file alone
    write_config(home / ".config" / "gleaner" / "gleanctl.toml", controller)
    assert status().returncode == 0
    # $GLEANER_CONFIG beats the home file, --config beats $GLEANER_CONFIG
    assert status(GLEANER_CONFIG=str(dead)).returncode == 5
    assert status("--config", str(good), GLEANER_CONFIG=str(dead)).returncode == 0
    assert status("--config", str(dead), GLEANER_CONFIG=str(good)).returncode == 5
    assert status(GLEANER_CONFIG=str(good)).returncode == 0
    # XDG_CONFIG_HOME moves the user's file, as it does for every XDG tool
    xdg = write_config(tmp_path / "xdg" / "gleaner" / "gleanctl.toml", controller, f"127.0.0.1:{free_port()}")
    assert status(XDG_CONFIG_HOME=str(xdg.parent.parent)).returncode == 5
    # a file named on purpose that is missing is an error naming it, never skipped
    done = status(GLEANER_CONFIG=str(tmp_path / "missing.toml"))
    assert done.returncode == 2 and f"$GLEANER_CONFIG names {tmp_path / 'missing.toml'}, which does not exist" \
        in done.stderr
    done = status("--config", str(tmp_path / "missing.toml"))
    assert done.returncode == 2 and str(tmp_path / "missing.toml") in done.stderr and "Traceback" not in done.stderr


def test_without_any_config_the_error_lists_every_place_tried(tmp_path):
    home = tmp_path / "empty-home"
    done = run("status", env=clean_env(HOME=str(home)))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    places = ["--config (not given)", "$GLEANER_CONFIG (not set)", str(home / ".config/gleaner/gleanctl.toml"),
              "/etc/gleaner/gleanctl.toml"]
    said = done.stderr[done.stderr.index("looked at: "):]
    assert [said.index(p) for p in places] == sorted(said.index(p) for p in places), said   # in the order tried


# -- 8. one exit code per class of error --------------------------------------------------------

def test_every_bad_backfill_value_gives_the_usage_code_and_changes_nothing(controller):
    before = backfill(controller)
    events = len(controller.events("backfill.configured"))
    for item, says in (("max_instances=abc", "max_instances: expected a whole number, not 'abc'"),
                       ("vcpus=0", "vcpus"),                 # the controller's bounds: INVALID_ARGUMENT
                       ("grace_seconds=-5", "grace_seconds: must not be negative"),
                       ("grace_seconds=3601", "grace_seconds"),
                       ("termination_policy=oldest", "termination_policy")):
        done = gleanctl(controller, "backfill", "set", item)
        assert done.returncode == gleanctl_module.EXIT_USAGE == 2, (item, done.stderr)
        assert says in done.stderr and "Traceback" not in done.stderr, (item, done.stderr)
    assert backfill(controller) == before
    assert len(controller.events("backfill.configured")) == events


def test_permission_not_found_unavailable_and_refused_each_have_their_code(controller):
    before = backfill(controller)
    done = gleanctl(controller, "backfill", "enable", tls=controller.env.pki.viewer)
    assert done.returncode == 3 and "permission denied" in done.stderr, done.stderr
    assert backfill(controller) == before
    done = gleanctl(controller, "release", "od-doesnotexist")
    assert done.returncode == 4 and "no lease" in done.stderr, done.stderr
    done = gleanctl(controller, "cancel", "req-doesnotexist")
    assert done.returncode == 4, done.stderr
    done = run("--controller", f"127.0.0.1:{free_port()}", *controller.gleanctl_args()[2:], "--timeout", "2", "nodes")
    assert done.returncode == 5 and "cannot reach" in done.stderr, done.stderr
    done = gleanctl(controller, "request", "--vcpus", "1", "--memory", "128")   # no nodes: rejected
    assert done.returncode == 1 and "rejected" in done.stdout, done.stdout + done.stderr
    assert controller.leases() == []


def test_the_readme_lists_the_exit_codes_gleanctl_uses():
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("#### Exit codes"):]
    rows = re.findall(r"^\| (\d+) \| ", section[:section.index("\n\n", section.index("| code"))], re.M)
    assert sorted(int(code) for code in rows) == sorted(gleanctl_module.EXIT_CODES)


# -- 5. singular aliases, "did you mean" ---------------------------------------------------------

def test_singular_and_plural_names_run_the_same_command(controller):
    for alias, command in (("node", "nodes"), ("vm", "vms"), ("event", "events"), ("reserves", "reserve")):
        want, got = gleanctl(controller, "--json", command), gleanctl(controller, "--json", alias)
        assert got.returncode == want.returncode == 0, (alias, got.stderr)
        if command != "events":   # the audit log grows while we read it
            assert json.loads(got.stdout) == json.loads(want.stdout), alias
        else:
            assert isinstance(json.loads(got.stdout), list)


def test_an_unknown_command_suggests_the_closest_and_keeps_the_usage_code(controller):
    for typed, close in (("nods", "'nodes'"), ("evnets", "'events'"), ("stauts", "'status'"),
                         ("reserv", "'reserve'")):
        done = gleanctl(controller, typed)
        assert done.returncode == 2, done.stderr
        assert f"invalid choice: '{typed}'; did you mean" in done.stderr and close in done.stderr, done.stderr
    done = gleanctl(controller, "backfill", "shwo")
    assert done.returncode == 2 and "did you mean 'show'?" in done.stderr
    done = gleanctl(controller, "zzzz")   # nothing close: no suggestion, the list of commands
    assert done.returncode == 2 and "did you mean" not in done.stderr and "choose from nodes" in done.stderr


# -- 7. backfill set --help: every key, its bounds and default -----------------------------------

def test_backfill_set_help_lists_every_key_with_the_bounds_the_controller_enforces(controller):
    from controller.checks import BACKFILL_KEYS
    from controller.core.records import BackfillConfig
    done = run("backfill", "set", "--help")
    assert done.returncode == 0, done.stderr
    listed = {line.split()[0]: line.split() for line in done.stdout.splitlines()
              if line.startswith("  ") and line.split()[0] in BACKFILL_KEYS}
    assert set(listed) == set(BACKFILL_KEYS)
    defaults = BackfillConfig()
    for key, words in listed.items():
        default = getattr(defaults, key)
        assert words[-2:] == ["default", str(getattr(default, "value", default)).lower()], words
    before = backfill(controller)
    try:
        # each range the help prints is exactly what the real controller takes: both ends in, one past out
        for key, words in listed.items():
            if ".." not in words[1]:
                continue
            low, high = (int(n) for n in words[1].split(".."))
            for value in (low, high):
                done = gleanctl(controller, "backfill", "set", f"{key}={value}")
                assert done.returncode == 0, (key, value, done.stderr)
            for value in (high + 1,) + ((low - 1,) if low > 0 else ()):
                done = gleanctl(controller, "backfill", "set", f"{key}={value}")
                assert done.returncode == 2 and key in done.stderr, (key, value, done.stderr)
    finally:
        controller.stub().SetBackfill(controller_pb2.SetBackfillRequest(
            **{f.name: getattr(before, f.name) for f in before.DESCRIPTOR.fields}), timeout=10)
    assert backfill(controller) == before
    for action in ("enable", "disable"):   # they take settings too, so they list them
        assert "max_instances" in run("backfill", action, "--help").stdout
