"""The systemd units' exposure (systemd-analyze security --offline) and what they name exists.

Scores before this issue: controller 3.6, agent 7.1 (docs/security.md, "systemd hardening").
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "deploy" / "systemd"


def exposure(unit: Path) -> float:
    if shutil.which("systemd-analyze") is None:
        pytest.fail("systemd-analyze is not installed (package systemd)", pytrace=False)
    done = subprocess.run(["systemd-analyze", "security", "--offline=yes", str(unit)], text=True,
                          capture_output=True, timeout=60)
    found = re.search(r"Overall exposure level for \S+: ([0-9.]+)", done.stdout)
    assert found, done.stdout + done.stderr
    return float(found.group(1))


@pytest.mark.parametrize("role, at_most", [("controller", 1.2), ("agent", 3.4)])
def test_each_unit_exposure_stays_at_its_hardened_score(role, at_most):
    assert exposure(UNITS / f"gleaner-{role}.service") <= at_most


@pytest.mark.parametrize("role", ["controller", "agent"])
def test_documentation_names_files_setup_role_installs(role):
    unit = (UNITS / f"gleaner-{role}.service").read_text()
    docs = re.search(r"^Documentation=(.*)$", unit, re.M).group(1).split()
    setup_role = (REPO / "scripts/setup-role.sh").read_text()
    assert 'for doc in "$ROLE.md" security.md' in setup_role and "/usr/share/doc/gleaner/$doc" in setup_role
    assert docs == [f"file:///usr/share/doc/gleaner/{role}.md", "file:///usr/share/doc/gleaner/security.md"]
    for doc in docs:
        assert (REPO / "docs" / Path(doc).name).is_file()
    prepare = (REPO / "vagrant/prepare.py").read_text()   # the lab's payload carries them
    assert '("controller.md", "agent.md", "security.md")' in prepare


def test_setup_role_makes_the_controllers_user_and_gives_it_its_key():
    text = (REPO / "scripts/setup-role.sh").read_text()
    assert "SERVICE_USER=gleaner-controller" in text
    assert 'useradd --system --user-group --no-create-home' in text and "/usr/sbin/nologin" in text
    assert 'chown "$SERVICE_USER:$SERVICE_USER" "$key"' in text and 'chmod 0600 "$key"' in text
    assert re.search(r"^User=gleaner-controller$", (UNITS / "gleaner-controller.service").read_text(), re.M)
