"""requirements.lock: every dependency pinned with hashes, and set-up installing from it.

The lock (pip-compile --generate-hashes, docs/development.md) must cover every runtime and
test dependency pyproject.toml names, at a version pyproject.toml allows, each entry with at
least one sha256; pip and setuptools pinned there too. scripts/setup.sh installs it with
--require-hashes, pip first (no `--upgrade pip` to whatever is newest), and the lab's
wheelhouse (vagrant/prepare.py) and scripts/setup-role.sh use it too.
"""
from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / "requirements.lock"


def entries(text: str) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) of a hashed requirements file."""
    found: dict[str, tuple[str, list[str]]] = {}
    name = None
    for line in text.splitlines():
        if re.match(r"[A-Za-z0-9]", line):
            spec = line.split()[0]
            assert "==" in spec, f"{line!r} is not pinned with =="
            raw, version = spec.split("==")
            name = canonicalize_name(raw)
            found[name] = (version, [])
        if name is not None:
            found[name][1].extend(re.findall(r"--hash=sha256:([0-9a-f]{64})", line))
        if line.startswith("#"):
            name = None
    return found


def declared() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["test"]]


def test_every_dependency_of_pyproject_is_locked_at_an_allowed_version():
    locked = entries(LOCK.read_text())
    for req in declared():
        name = canonicalize_name(req.name)
        assert name in locked, f"{req.name} (pyproject.toml) is not in requirements.lock"
        assert req.specifier.contains(locked[name][0]), f"{name}=={locked[name][0]} violates {req}"


def test_every_lock_entry_has_a_hash_and_pip_is_pinned():
    locked = entries(LOCK.read_text())
    assert len(locked) >= 30
    for name, (version, hashes) in locked.items():
        assert hashes, f"{name}=={version} has no --hash in requirements.lock"
    assert "pip" in locked and "setuptools" in locked   # the installer and the build backend too
    assert "-e " not in LOCK.read_text() and "file://" not in LOCK.read_text()


def lock_subset(lock: Path, *names: str) -> str:
    done = subprocess.run(["bash", "-c", f'source "{REPO}/scripts/setup-lib.sh"; lock_subset "$@"', "-", str(lock),
                           *names], text=True, capture_output=True, check=True)
    return done.stdout


def test_lock_subset_picks_whole_entries_with_their_hashes():
    """What setup.sh installs first (pip, setuptools) and setup-role.sh takes from a wheelhouse."""
    picked = entries(lock_subset(LOCK, "pip", "setuptools"))
    full = entries(LOCK.read_text())
    assert picked == {"pip": full["pip"], "setuptools": full["setuptools"]}
    assert entries(lock_subset(LOCK, "python_dateutil")) == {"python-dateutil": full["python-dateutil"]}


def test_setup_installs_the_lock_with_hashes_and_a_pinned_pip():
    setup, lib = (REPO / "scripts/setup.sh").read_text(), (REPO / "scripts/setup-lib.sh").read_text()
    assert "--upgrade pip" not in setup and "install -q -e" not in setup
    assert 'install_locked "$VENV/bin/python" "$LOCK"' in setup
    assert 'LOCK="$REPO/requirements.lock"' in setup
    body = lib[lib.index("install_locked() {"):]
    body = body[:body.index("\n}\n")]
    assert 'lock_subset "$lock" pip setuptools' in body   # pip from the lock, before anything else
    assert body.count("--require-hashes") == 2 and "--no-build-isolation" in body
    assert "--no-deps --no-build-isolation -e" in setup    # the project itself adds nothing unlocked


def test_setup_role_and_the_lab_wheelhouse_use_hashes():
    role = (REPO / "scripts/setup-role.sh").read_text()
    assert role.count("--require-hashes") >= 2 and "install_locked" in role
    assert re.search(r'install -q "\$HERE/\.\."', role) is None   # no unlocked install from PyPI
    prepare = (REPO / "vagrant/prepare.py").read_text()
    assert '"--require-hashes"' in prepare and "LOCK = \"requirements.lock\"" in prepare
