"""The lab smoke run's verdict (tests/bench/lab.py verdict()), over plain data.

It passes only when the most recent backfill VM was the one preempted, it shut down cleanly,
the powered-off node rejoined, nothing was left and the units ran as designed; a failure of
the lab itself (vagrant, a boot timeout) is "infrastructure" (exit 75, the only one .ci/run
tries again), anything else "product" (exit 1).
"""
from __future__ import annotations

import copy
import subprocess
from pathlib import Path

import pytest

from tests.bench import lab

REPO = Path(__file__).resolve().parents[2]
UNITS = {"controller": {"role": "controller", "Type": "notify", "User": "gleaner-controller", "ActiveState": "active",
                        "NRestarts": "0", "MainPID": "812", "process_user": "gleaner-controller",
                        "key": "gleaner-controller:600", "docs": "present"},
         "node1": {"role": "agent", "Type": "notify", "User": "", "ActiveState": "active", "NRestarts": "0",
                   "MainPID": "640", "process_user": "root", "docs": "present"}}
REPLAYED = {"identical_share": 1.0, "items": 2, "unexplained": 0, "differences": [], "recording_lines": 412}
PASSING = {"backfill_vms": 4, "preempted_most_recent": True, "preempted_outcome": "clean_shutdown",
           "preempted_path": "instant", "rejoined": True, "cleaned": True, "services": UNITS, "replay": REPLAYED}
ODD = {"request_id": "lab-1", "item": "victims", "live": ["bf:node1#2"], "replay": ["bf:node1#1"],
       "explanation": "the same pool state before the decision, yet another decision", "explained": False}


def judged(**changes) -> dict:
    result = copy.deepcopy(PASSING)
    result.update(changes)
    return lab.verdict(result)


def test_a_run_with_everything_as_designed_passes():
    decided = lab.verdict(copy.deepcopy(PASSING))
    assert decided == {"ok": True, "failure_kind": None, "problems": []}
    assert lab.exit_code(decided) == 0


@pytest.mark.parametrize("changes, problem", [
    ({"preempted_most_recent": False}, "most recent backfill VM was not the one preempted"),
    ({"preempted_outcome": "destroyed_after_grace"}, "not shut down cleanly (destroyed_after_grace)"),
    ({"preempted_outcome": None}, "not shut down cleanly (None)"),
    ({"rejoined": False}, "did not rejoin"),
    ({"cleaned": False, "left_behind": ["domain gleaner-lab-node1"]}, "left things behind"),
    ({"services": {}}, "units were not checked"),
    ({"error": "gave up after 600s waiting for the backfill guests to boot"}, "backfill guests to boot"),
    ({"replay": {"error": "reading the recording: no such file"}}, "recording was not replayed: reading"),
    ({"replay": {**REPLAYED, "items": 0}}, "recording was not replayed: no decision in it"),
    ({"replay": None}, "recording was not replayed"),
    ({"replay": {**REPLAYED, "identical_share": 0.5, "unexplained": 1, "differences": [ODD]}},
     "the replay of the controller's recording differs, unexplained"),
])
def test_each_thing_short_of_design_fails_as_the_products(changes, problem):
    decided = judged(**changes)
    assert decided["ok"] is False and decided["failure_kind"] == "product"
    assert any(problem in p for p in decided["problems"]), decided["problems"]
    assert lab.exit_code(decided) == lab.PRODUCT_EXIT == 1


@pytest.mark.parametrize("machine, key, value", [
    ("controller", "User", ""), ("controller", "process_user", "root"), ("controller", "Type", "simple"),
    ("controller", "key", "root:600"), ("node1", "NRestarts", "2"), ("node1", "ActiveState", "failed"),
    ("node1", "docs", "missing file:///usr/share/doc/gleaner/agent.md"),
])
def test_a_unit_not_as_designed_fails(machine, key, value):
    services = copy.deepcopy(UNITS)
    services[machine][key] = value
    decided = judged(services=services)
    assert decided["failure_kind"] == "product"
    assert any(p.startswith(f"{machine}: {key} is") for p in decided["problems"]), decided["problems"]


def test_an_infrastructure_failure_is_retryable_and_named_so():
    decided = lab.verdict({"error": "vagrant up failed (1): a VM did not boot in time",
                           "failure_kind": "infrastructure", "cleaned": True})
    assert decided == {"ok": False, "failure_kind": "infrastructure",
                       "problems": ["vagrant up failed (1): a VM did not boot in time"]}
    assert lab.exit_code(decided) == lab.INFRA_EXIT == 75


def fake_vagrant(tmp_path: Path, output: str, code: int) -> dict:
    (tmp_path / "vagrant").write_text(f"#!/bin/sh\ncat <<'OUT'\n{output}\nOUT\nexit {code}\n")
    (tmp_path / "vagrant").chmod(0o755)
    return {"PATH": f"{tmp_path}:/usr/bin:/bin"}


@pytest.mark.parametrize("output, kind", [
    ("==> node1: Waiting for domain to get an IP address...\nTimed out while waiting for the machine to boot.",
     lab.InfrastructureError),
    ("Error while activating network: Call to virNetworkCreate failed", lab.InfrastructureError),
    ("==> node1: Running provisioner: setup (shell)...\nsetup-role.sh: gleaner-agent did not start\n"
     "The SSH command responded with a non-zero exit status. Vagrant\nassumes that this means the command failed.",
     RuntimeError),
])
def test_vagrant_failures_are_told_apart(tmp_path, monkeypatch, output, kind):
    """A VM that did not boot is infrastructure; setup-role.sh failing in it is the product's."""
    for key, value in fake_vagrant(tmp_path, output, 1).items():
        monkeypatch.setenv(key, value)
    with pytest.raises(RuntimeError) as raised:
        lab.vagrant_checked("up")
    assert type(raised.value) is kind


def test_ci_retries_only_infrastructure_failures(tmp_path):
    """.ci/run's lab loop, with the bench replaced by one exiting with given codes in turn."""
    script = (REPO / ".ci/run").read_text()
    loop = script[script.index("INFRA_EXIT=75"):]
    for codes, want_exit, want_runs, said in (([0], 0, 1, ""), ([1], 1, 1, "no retry"),
                                              ([75, 0], 0, 2, "retrying the lab smoke run once"),
                                              ([75, 1], 1, 2, "no retry"), ([75, 75], 1, 2, "attempt 2 of 2")):
        runs = tmp_path / "runs"
        runs.write_text("")
        bench = tmp_path / "python"
        bench.write_text(f"#!/bin/bash\necho x >> {runs}\ncodes=({' '.join(map(str, codes))})\n"
                         f"exit ${{codes[$(( $(wc -l < {runs}) - 1 ))]}}\n")
        bench.chmod(0o755)
        done = subprocess.run(["bash", "-c", "set -euo pipefail\n" + loop.replace(".venv/bin/python", str(bench))],
                              text=True, capture_output=True)
        assert done.returncode == want_exit, (codes, done.stderr)
        assert len(runs.read_text().splitlines()) == want_runs, codes
        assert said in done.stderr, (codes, done.stderr)


def test_a_failed_run_shows_each_vms_console_tail_from_the_host(tmp_path, monkeypatch, capsys):
    """A VM that never got an address (session 28: node1, 900 s) can only be read from its
    console file on the host: the last lines of each, and a missing one named, not a crash."""
    monkeypatch.setenv("GLEANER_LAB_STATE", str(tmp_path))
    (tmp_path / "console").mkdir()
    (tmp_path / "console" / "controller.log").write_text("".join(f"boot line {i}\n" for i in range(50)))
    lab.consoles({"machines": [{"name": "controller"}, {"name": "node1"}]}, lines=3)
    said = capsys.readouterr().err
    assert "--- controller: serial console" in said and "boot line 47\nboot line 48\nboot line 49" in said
    assert "boot line 46" not in said
    assert "--- node1: serial console" in said and "(not readable: No such file or directory)" in said
