"""The books' layout holds: a kernel (controller/core/books.py) and stages above it, each a module
whose class owns the state its `_init_` method sets.

- A stage never writes state another stage or the kernel owns (no assignment to it, no item
  assignment, no call of a mutating method on it): it changes the books through the kernel's
  methods and tells other stages through their hooks.
- The stages import the kernel and the records, never each other; the kernel imports no stage.
- No module of the core over 600 lines, no class over 400.
"""
from __future__ import annotations

import ast

from tests.agentproc import REPO

CORE = REPO / "controller" / "core"
KERNEL = "books"
STAGES = ["views", "lifecycle", "requests", "matching", "idleness", "filling", "volunteers"]
MUTATORS = {"add", "discard", "remove", "pop", "popitem", "clear", "update", "setdefault", "append", "extend",
            "insert", "difference_update", "intersection_update", "symmetric_difference_update", "move_to_end",
            "appendleft", "sort", "reverse"}


def main_class(tree: ast.Module) -> ast.ClassDef:
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and any(
        isinstance(f, ast.FunctionDef) and f.name.startswith("_init_") for f in n.body)]
    assert len(classes) == 1, [c.name for c in classes]
    return classes[0]


def self_attribute(node: ast.AST) -> str | None:
    """`self.X` under any subscripts: X."""
    while isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def owned(cls: ast.ClassDef) -> set[str]:
    names = set()
    for function in cls.body:
        if isinstance(function, ast.FunctionDef) and function.name.startswith("_init_"):
            for node in ast.walk(function):
                targets = node.targets if isinstance(node, ast.Assign) else \
                    [node.target] if isinstance(node, ast.AnnAssign) else []
                names |= {t.attr for t in targets if isinstance(t, ast.Attribute) and self_attribute(t) == t.attr}
    return names


def writes(cls: ast.ClassDef) -> list[tuple[str, str, int]]:
    """(attribute, method, line) for every write to self.X in the class."""
    found = []
    for function in cls.body:
        if not isinstance(function, ast.FunctionDef):
            continue
        for node in ast.walk(function):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else \
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            for target in targets:
                for one in (target.elts if isinstance(target, ast.Tuple) else [target]):
                    if self_attribute(one):
                        found.append((self_attribute(one), function.name, node.lineno))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS \
                    and self_attribute(node.func.value):
                found.append((self_attribute(node.func.value), function.name, node.lineno))
    return found


def parsed(name: str) -> ast.Module:
    return ast.parse((CORE / f"{name}.py").read_text())


def foreign_writes(modules: dict[str, ast.Module]) -> list[str]:
    classes = {name: main_class(tree) for name, tree in modules.items()}
    owners = {attr: name for name, cls in classes.items() for attr in owned(cls)}
    return [f"{name}.{method}:{line} writes {attr} (owned by {owners.get(attr, 'nobody')})"
            for name, cls in classes.items() for attr, method, line in writes(cls)
            if attr not in owned(cls)]


def test_no_stage_writes_state_it_does_not_own():
    modules = {name: parsed(name) for name in [KERNEL, *STAGES]}
    assert foreign_writes(modules) == []


def test_the_ownership_check_sees_a_stage_writing_the_kernels_state():
    modules = {name: parsed(name) for name in [KERNEL, "lifecycle"]}
    broken = ast.parse("class Lifecycle:\n    def _init_lifecycle(self):\n        self.retry_at = {}\n"
                       "    def tick(self, now):\n        self.leases.pop('x')\n        self.nodes['n'] = 1\n"
                       "        self.started_at = now\n")
    modules["lifecycle"] = broken
    found = foreign_writes(modules)
    assert len(found) == 3 and all("owned by" in f for f in found), found


def local_imports(tree: ast.Module) -> set[str]:
    return {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 1}


def test_stages_import_the_kernel_never_each_other():
    assert not local_imports(parsed(KERNEL)) & set(STAGES)
    for stage in STAGES:
        assert not local_imports(parsed(stage)) & (set(STAGES) - {stage}), stage


def test_no_module_of_the_core_over_600_lines_and_no_class_over_400():
    for path in sorted(CORE.glob("*.py")):
        text = path.read_text()
        assert text.count("\n") <= 600, path.name
        for node in ast.parse(text).body:
            if isinstance(node, ast.ClassDef):
                assert node.end_lineno - node.lineno < 400, (path.name, node.name)
