"""gleanctl stays light: it checks its arguments with the shared rules and loads neither the books
(the ledger) nor numpy; the pure core loads no gRPC, libvirt, pyroute2 or SQLite."""
from __future__ import annotations

import subprocess
import sys

from tests.agentproc import REPO


def loaded_after(statement: str, modules: tuple[str, ...]) -> list[str]:
    probe = f"import sys; {statement}; print(' '.join(m for m in {modules!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_gleanctl_loads_neither_the_ledger_nor_numpy():
    heavy = ("numpy", "controller.core.ledger", "controller.core.policy", "controller.core.reserves",
             "controller.service", "matplotlib")
    assert loaded_after("import controller.gleanctl", heavy) == []
    assert loaded_after("import controller.checks", heavy) == []


def test_the_core_and_its_records_do_no_io():
    io = ("grpc", "libvirt", "pyroute2", "sqlite3")
    every = "import importlib, pkgutil, controller.core as c; " \
            "[importlib.import_module('controller.core.' + m.name) for m in pkgutil.iter_modules(c.__path__)]"
    assert loaded_after(every, io) == []
    assert loaded_after("import controller.core.records, controller.core.reserve_settings",
                        io + ("numpy",)) == []
