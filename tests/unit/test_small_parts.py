"""The image builder's module resolution, cgroup detection, logs, and generated code freshness."""
from __future__ import annotations

import importlib.util
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from nodeagent.host import cgroups
from gleaner_common.logs import LogfmtFormatter, log_event

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("image_build", REPO / "images" / "build.py")
image_build = importlib.util.module_from_spec(spec)
spec.loader.exec_module(image_build)

MODULES_DEP = """\
kernel/drivers/input/evdev.ko:
kernel/drivers/acpi/button.ko:
kernel/drivers/virtio/virtio.ko:
kernel/drivers/virtio/virtio_ring.ko:
kernel/drivers/virtio/virtio_pci.ko: kernel/drivers/virtio/virtio_pci_modern_dev.ko kernel/drivers/virtio/virtio_ring.ko kernel/drivers/virtio/virtio.ko
kernel/drivers/virtio/virtio_pci_modern_dev.ko:
kernel/drivers/block/virtio_blk.ko: kernel/drivers/virtio/virtio_ring.ko kernel/drivers/virtio/virtio.ko
kernel/drivers/net/virtio_net.ko: kernel/drivers/net/net_failover.ko kernel/net/core/failover.ko kernel/drivers/virtio/virtio_ring.ko kernel/drivers/virtio/virtio.ko
kernel/drivers/net/net_failover.ko: kernel/net/core/failover.ko
kernel/net/core/failover.ko:
kernel/drivers/unrelated.ko:
"""


def test_modules_load_after_their_dependencies_and_only_what_is_wanted():
    deps = image_build.parse_modules_dep(MODULES_DEP)
    order = image_build.module_load_order(deps, image_build.WANTED_MODULES)
    names = [Path(p).name for p in order]
    assert "unrelated.ko" not in names and len(names) == len(set(names))
    for module, needs in deps.items():
        if module in order:
            assert all(order.index(dep) < order.index(module) for dep in needs), module
    assert {"evdev.ko", "button.ko", "virtio_blk.ko", "virtio_net.ko", "failover.ko"} <= set(names)


def test_builtin_modules_are_skipped():
    deps = image_build.parse_modules_dep("kernel/drivers/input/evdev.ko:\n")
    assert [Path(p).name for p in image_build.module_load_order(deps, ("evdev", "button"))] == ["evdev.ko"]


def fake_cgroupfs(root: Path, version: int, idle: bool) -> Path:
    cpu = root if version == 2 else root / "cpu"
    (cpu / "machine").mkdir(parents=True)
    if version == 2:
        (root / "cgroup.controllers").write_text("cpu io memory\n")
        (cpu / "machine" / "cpu.weight").write_text("100\n")
    else:
        (cpu / "cpu.shares").write_text("1024\n")
    if idle:
        (cpu / "machine" / "cpu.idle").write_text("0\n")
    return root


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("idle", [True, False])
def test_cgroup_detection_on_a_fake_cgroupfs(tmp_path, version, idle):
    facts = cgroups.detect(fake_cgroupfs(tmp_path, version, idle))
    assert facts == cgroups.CgroupFacts(version=version, cpu_idle=idle)


def test_logfmt_lines_quote_what_needs_quoting(caplog):
    logger = logging.getLogger("test.logs")
    with caplog.at_level(logging.INFO, logger="test.logs"):
        log_event(logger, "domain.terminated", domain="vm1", detail='said "bye" and left', took=1.5)
    line = LogfmtFormatter().format(caplog.records[-1])
    assert "event=domain.terminated domain=vm1" in line
    assert r'detail="said \"bye\" and left"' in line and "took=1.5" in line


def test_log_fields_may_not_clash_with_logging_internals():
    with pytest.raises(ValueError, match="name"):
        log_event(logging.getLogger("x"), "e", name="vm1")


def test_generated_protobuf_code_is_fresh():
    result = subprocess.run([sys.executable, "-m", "protos", "--check"], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr


def test_ci_runs_the_readme_test_command():
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    commands = [line.strip() for line in readme.split("```")[1].splitlines() if line.strip()]
    assert len(commands) == 2
    # the README's test command, one step per line: under `set -e` a failing set-up then fails CI,
    # where in an && list it would only skip the tests
    steps = [step.strip() for step in commands[1].split("&&")]
    lines = [line.strip() for line in ci.splitlines()]
    assert all(step in lines for step in steps), (steps, lines)
    assert [lines.index(step) for step in steps] == sorted(lines.index(step) for step in steps)
    assert "set -euo pipefail" in ci
