"""The simulator's layout holds (issue 22's guide): no module of controller/sim over 600 lines, no
class over 400, and controller.sim.traces still offers every trace adapter its modules hold."""
from __future__ import annotations

import ast

from tests.agentproc import REPO

SIM = REPO / "controller" / "sim"


def test_no_simulator_module_over_600_lines_and_no_class_over_400():
    too_long = []
    for path in sorted(SIM.glob("*.py")):
        text = path.read_text()
        if text.count("\n") > 600:
            too_long.append(f"{path.name}: {text.count(chr(10))} lines")
        for node in ast.parse(text).body:
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > 400:
                too_long.append(f"{path.name}: class {node.name} of {node.end_lineno - node.lineno + 1} lines")
    assert too_long == []


def defined(path) -> set[str]:
    """The public names a module defines at its top level (classes, functions, assignments)."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {name for name in names if not name.startswith("_")}


def test_the_traces_module_offers_every_public_name_of_the_trace_modules():
    import importlib
    from controller.sim import traces
    for name in ("trace_base", "cloud_traces", "swf"):
        module = importlib.import_module(f"controller.sim.{name}")
        public = defined(SIM / f"{name}.py")
        assert public and public <= set(traces.__all__), (name, sorted(public - set(traces.__all__)))
        assert all(getattr(traces, n) is getattr(module, n) for n in public), name
    assert set(traces.__all__) >= defined(SIM / "traces.py")
