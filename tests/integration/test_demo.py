"""The README's first command: the all-in-one pool demo, run to the end."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.agentproc import REPO, free_port
from tests.integration.test_controller import domain_states

pytestmark = pytest.mark.libvirt


def test_the_readme_pool_demo_runs_end_to_end(test_env):
    """The README's first command after set-up: the all-in-one pool, to the end, leaving nothing behind."""
    state_dir = test_env.root / "pool-demo"
    port = free_port()
    done = subprocess.run([sys.executable, "-m", "controller.demo", "--state-dir", str(state_dir), "--port", str(port),
                           "--image-dir", str(test_env.image_dir), "--domain-type", "qemu"],
                          capture_output=True, text=True, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "every backfill guest has booted" in out
    # the default interruption: the victim is saved, counted as a preemption, and resumed after the release
    assert "preempted bf-" in out and "vm.hibernated" in out and "saved to disk (hibernated)" in out
    assert "backfill   enabled; 1 preemptions" in out
    assert "resumed from its saved state" in out and "vm.resumed" in out
    assert not [name for name in domain_states() if name.startswith("pool-")]
