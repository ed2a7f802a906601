"""gleanctl on PATH after set-up (issue 27, item 4): set-up's own function (scripts/setup-lib.sh,
install_gleanctl) writes a wrapper into a bin directory, run here into a temporary one rather than
/usr/local/bin, without the rest of set-up; typed by name from PATH, it drives a real controller."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.agentproc import REPO, LabEnv
from tests.controllerproc import ControllerProcess

VENV = REPO / ".venv"


def install(bin_dir) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", 'source "$1/scripts/setup-lib.sh" && install_gleanctl "$2" "$3"', "-",
                           str(REPO), str(VENV), str(bin_dir)], capture_output=True, text=True, timeout=30)


def by_name(bin_dir, *args: str, cwd) -> subprocess.CompletedProcess:
    """`gleanctl ARGS` as an admin types it: found on PATH, from an unrelated directory. PYTHONPATH
    makes the venv import this checkout's code (the venv's editable install may be another's)."""
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    return subprocess.run(["gleanctl", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def controller(tmp_path_factory):
    env = LabEnv.in_dir(tmp_path_factory.mktemp("gleanctl-path"))
    proc = ControllerProcess(env, name="path-ctl").start()
    yield proc
    proc.stop()


def test_setup_puts_gleanctl_on_path_and_it_drives_a_real_controller(controller, tmp_path):
    bin_dir = tmp_path / "bin"
    done = install(bin_dir)
    assert done.returncode == 0 and f"{bin_dir}/gleanctl runs {VENV}/bin/python" in done.stdout, done.stderr
    wrapper = bin_dir / "gleanctl"
    assert wrapper.stat().st_mode & 0o777 == 0o755
    assert by_name(bin_dir, "--version", cwd=tmp_path).stdout.startswith("gleanctl ")
    status = by_name(bin_dir, *controller.gleanctl_args(), "-o", "json", "status", cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["nodes_up"] == 0
    # again: in place, untouched
    before = (wrapper.read_text(), wrapper.stat().st_mtime_ns)
    done = install(bin_dir)
    assert done.returncode == 0 and "is in place" in done.stdout
    assert (wrapper.read_text(), wrapper.stat().st_mtime_ns) == before
    assert [p.name for p in bin_dir.iterdir()] == ["gleanctl"]   # no temporary file left


def test_a_gleanctl_set_up_did_not_write_is_left_alone(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mine = bin_dir / "gleanctl"
    mine.write_text("#!/bin/sh\necho the admin's own\n")
    done = install(bin_dir)
    assert done.returncode == 0 and "was not written by set-up; left alone" in done.stdout
    assert mine.read_text() == "#!/bin/sh\necho the admin's own\n"


def test_setup_calls_it_after_making_the_venv():
    setup = (REPO / "scripts" / "setup.sh").read_text()
    assert setup.index('install_gleanctl "$VENV"') > setup.index("python: installing the project")
