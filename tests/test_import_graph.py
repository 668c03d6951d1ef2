"""The import graph of src/hopper: no cycles, and core imports nothing outside core.

Every module is parsed with `ast`; every import counts, including those inside
functions (a lazy import hides a cycle from the interpreter, not from a reader).
Imports under `if TYPE_CHECKING:` do not run and are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = "hopper"

# Cycles not yet broken. This set may only shrink: a new cycle fails the test,
# and so does a listed one that no longer exists (remove it from here).
KNOWN_CYCLES: frozenset[frozenset[str]] = frozenset()


def module_names() -> dict[str, Path]:
    """Every module under src/hopper, by dotted name (a package by its __init__)."""
    names: dict[str, Path] = {}
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """All import statements at any depth, except the bodies of `if TYPE_CHECKING:`."""
    found: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))
    return found


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The hopper modules `name` imports (`from pkg import mod` names the module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in _runtime_imports(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            parts = package.split(".")
            parts = parts[: len(parts) - (node.level - 1)]
            base = ".".join(parts + ([node.module] if node.module else []))
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            targets.add(submodule if submodule in modules else base)
    return {t for t in targets if t in modules and t != name}


def import_graph() -> dict[str, set[str]]:
    modules = module_names()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: set[frozenset[str]] = set()
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: set[str] = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.add(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_cycle_finder_sees_a_function_level_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == {frozenset({"a", "b", "c"})}
    tree = ast.parse("def f():\n    from hopper import runner\n")
    assert [type(n) for n in _runtime_imports(tree)] == [ast.ImportFrom]
    guarded = ast.parse("if TYPE_CHECKING:\n    import hopper.runner\n")
    assert _runtime_imports(guarded) == []


def test_no_new_import_cycles() -> None:
    found = cycles(import_graph())
    new = found - KNOWN_CYCLES
    listed = "\n".join(" <-> ".join(sorted(c)) for c in sorted(new, key=sorted))
    assert not new, f"import cycles in src/hopper: move what they share to a module\n{listed}"
    gone = KNOWN_CYCLES - found
    assert not gone, f"remove these from KNOWN_CYCLES, they are broken: {sorted(map(sorted, gone))}"


def test_core_imports_only_core() -> None:
    outside = {
        f"{name} imports {target}"
        for name, targets in import_graph().items()
        if name.startswith("hopper.core")
        for target in targets
        if not target.startswith("hopper.core") and target != PACKAGE
    }
    assert not outside, "hopper.core must not import the shell:\n" + "\n".join(sorted(outside))
