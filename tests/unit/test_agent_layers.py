"""The node agent's layers, kept (DESIGN.md, "The house"):

* nodeagent/host/ is the only layer that touches the host, and imports nothing from above it:
  no module of nodeagent outside host/, relative imports included (gleaner_common is fine);
* the host's interfaces (psutil, libvirt, pyroute2) are imported only in host/, and no module
  outside it names a /proc or /sys path or opens a file itself;
* the priority rules (nodeagent/priority.py, nodeagent/guard.py) are pure: neither they nor
  anything they import, followed through the repository, imports a module that does I/O.

The checks read the source with `ast`, so they judge every import, also those inside functions.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Only host/ may import these: they are the host's interfaces.
HOST_LIBRARIES = ("psutil", "libvirt", "pyroute2")
# What a pure rule may not import, directly or through the repository's modules: the host's
# interfaces, files and processes, the network and RPC, storage, the clock, threads, logging,
# the agent's other libraries, and dynamic imports (which would hide all of these).
IO_MODULES = HOST_LIBRARIES + (
    "os", "pathlib", "io", "shutil", "tempfile", "glob", "fcntl", "mmap", "stat", "subprocess", "signal",
    "socket", "select", "selectors", "ssl", "http", "urllib", "requests", "grpc", "protos", "sqlite3",
    "time", "threading", "multiprocessing", "concurrent", "asyncio", "logging", "gleaner_common.logs",
    "prometheus_client", "apscheduler", "ctypes", "importlib")
PURE_RULES = ("nodeagent/priority.py", "nodeagent/guard.py")
# A client of the agent (it starts one and reads its console logs), not part of the daemon.
NOT_THE_AGENT = ("nodeagent/demo.py",)


def package_of(path: Path, root: Path) -> str:
    """The dotted package a module file belongs to (its directory under root)."""
    return ".".join(path.relative_to(root).parent.parts)


def imports(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, module) for every import in a module, relative ones made absolute; `from X import a`
    gives X and X.a (a may be a submodule)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = package_of(path, root).split(".")
                base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found += [(node.lineno, base)] + [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def is_within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def source_of(module: str, root: Path) -> Path | None:
    """The repository file of a module, or None when it is not the repository's."""
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def host_imports_from_above(root: Path = REPO) -> list[str]:
    problems = []
    for path in sorted((root / "nodeagent" / "host").rglob("*.py")):
        for line, module in imports(path, root):
            if is_within(module, ("nodeagent",)) and not is_within(module, ("nodeagent.host",)):
                problems.append(f"{path.relative_to(root)}:{line} imports {module}")
    return problems


def agent_modules_outside_host(root: Path = REPO) -> list[Path]:
    host = root / "nodeagent" / "host"
    return [path for path in sorted((root / "nodeagent").rglob("*.py")) if host not in path.parents]


def host_reads_outside_host(root: Path = REPO) -> list[str]:
    """Imports of the host's interfaces, /proc and /sys paths, and open() outside host/."""
    problems = []
    for path in agent_modules_outside_host(root):
        name = str(path.relative_to(root))
        problems += [f"{name}:{line} imports {module}" for line, module in imports(path, root)
                     if is_within(module, HOST_LIBRARIES)]
        for node in ast.walk(ast.parse(path.read_text(), name)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and node.value.startswith(("/proc", "/sys")):
                problems.append(f"{name}:{node.lineno} names {node.value!r}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open" \
                    and name not in NOT_THE_AGENT:
                problems.append(f"{name}:{node.lineno} opens a file")
    return problems


def impure_imports(rules: tuple[str, ...] = PURE_RULES, root: Path = REPO) -> list[str]:
    """I/O modules imported by the rules or by any repository module they import, followed through.
    Parent packages' __init__ are not followed (gleaner_common's reads its own version once)."""
    problems, seen = [], set()
    todo = [root / rule for rule in rules]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for line, module in imports(path, root):
            inside = source_of(module, root)
            if inside is not None:
                todo.append(inside)
            elif is_within(module, IO_MODULES):
                problems.append(f"{path.relative_to(root)}:{line} imports {module}")
    return sorted(set(problems))


def test_host_modules_import_nothing_from_above_them():
    assert host_imports_from_above() == []


def test_only_host_modules_read_the_host():
    assert host_reads_outside_host() == []


def test_the_priority_rules_import_nothing_that_does_io():
    assert impure_imports() == []


def test_the_priority_rules_load_no_other_part_of_the_agent_nor_any_host_interface():
    watched = ("nodeagent", "libvirt", "psutil", "pyroute2", "grpc", "sqlite3", "prometheus_client")
    probe = (f"import sys, nodeagent.priority, nodeagent.guard; "
             f"print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in {watched!r})))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 0, done.stderr
    assert set(done.stdout.split()) <= {"nodeagent", "nodeagent.priority", "nodeagent.guard", "nodeagent.host",
                                        "nodeagent.host.settings"}


def test_the_checks_catch_what_they_are_for(tmp_path):
    """Each check fails on a small tree that breaks its rule (as the agent's tree did before the
    layers were put right: host/domainxml.py imported ..priority and ..validation, host/netshape.py
    ..priority, metrics.py and inventory.py psutil, and priority.py host/cgroups, which imports os)."""
    host = tmp_path / "nodeagent" / "host"
    host.mkdir(parents=True)
    for package in (tmp_path / "nodeagent", host):
        (package / "__init__.py").write_text("")
    (host / "cgroups.py").write_text("import os\nfrom .settings import CpuSetting\n")
    (host / "settings.py").write_text("from dataclasses import dataclass\n")
    (host / "netshape.py").write_text("from ..priority import NetCap\n")
    (host / "domainxml.py").write_text("def build():\n    from nodeagent.validation import LaunchSpec\n")
    (tmp_path / "nodeagent" / "priority.py").write_text("from .host.cgroups import CpuSetting\n")
    (tmp_path / "nodeagent" / "guard.py").write_text("from collections import deque\n")
    (tmp_path / "nodeagent" / "metrics.py").write_text(
        "import psutil\nPROC = '/proc/self/stat'\ndef read():\n    return open(PROC).read()\n")
    assert host_imports_from_above(tmp_path) == ["nodeagent/host/domainxml.py:2 imports nodeagent.validation",
                                                 "nodeagent/host/domainxml.py:2 imports nodeagent.validation.LaunchSpec",
                                                 "nodeagent/host/netshape.py:1 imports nodeagent.priority",
                                                 "nodeagent/host/netshape.py:1 imports nodeagent.priority.NetCap"]
    assert host_reads_outside_host(tmp_path) == ["nodeagent/metrics.py:1 imports psutil",
                                                 "nodeagent/metrics.py:2 names '/proc/self/stat'",
                                                 "nodeagent/metrics.py:4 opens a file"]
    assert impure_imports(root=tmp_path) == ["nodeagent/host/cgroups.py:1 imports os"]
