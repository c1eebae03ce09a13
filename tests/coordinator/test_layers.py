"""The coordinator's modules import one way down: no circle, and only the package
face (`__init__`) knows the `Coordinator` class; helpers get a `Runtime`."""

from __future__ import annotations

import ast
from pathlib import Path

import coordinator

PACKAGE = Path(coordinator.__file__).parent


def _type_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(path: Path) -> tuple[set[str], set[str]]:
    """(modules of the package imported when `path` runs, those imported for types only)."""
    tree = ast.parse(path.read_text())
    run: set[str] = set()
    typed: set[str] = set()

    def visit(nodes: list[ast.stmt], into: set[str]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and _type_only(node):
                visit(node.body, typed)
                visit(node.orelse, into)
                continue
            for sub in ast.walk(node):
                if isinstance(sub, ast.ImportFrom) and sub.level == 1:
                    if sub.module:
                        into.add(sub.module.split(".")[0])
                    else:  # from . import x
                        into.update(a.name for a in sub.names)
                elif isinstance(sub, ast.ImportFrom) and (sub.module or "").startswith(
                        "coordinator."):
                    into.add(sub.module.split(".")[1])  # type: ignore[union-attr]

    visit(tree.body, run)
    return run, typed


def _graph(type_only: bool) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.glob("*.py")):
        run, typed = _imports(path)
        deps = run | typed if type_only else run
        graph[path.stem] = {d for d in deps if (PACKAGE / f"{d}.py").exists()} - {path.stem}
    return graph


def _cycle(graph: dict[str, set[str]], skip: set[str]) -> list[str] | None:
    """A circle of imports among the modules not in `skip`, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if dep in skip:
                continue
            if state.get(dep) == 1:
                return [*stack[stack.index(dep):], dep]
            if dep not in state and (found := visit(dep)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in skip and node not in state and (found := visit(node)):
            return found
    return None


def test_only_the_package_face_imports_the_coordinator_class():
    """No module of coordinator/ but __init__ imports _coordinator, not even for types."""
    offenders = [m for m, deps in _graph(type_only=True).items()
                 if "_coordinator" in deps and m != "__init__"]
    assert offenders == []


def test_coordinator_modules_import_without_a_circle():
    """The imports that run (outside `if TYPE_CHECKING:`) among coordinator's modules
    form no circle; the package face and the CLI, which gather everything, aside."""
    cycle = _cycle(_graph(type_only=False), skip={"__init__"})
    assert cycle is None, " -> ".join(cycle or [])


def test_the_cycle_check_can_fail():
    """The check finds a circle when there is one."""
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}, skip=set()) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}, skip=set()) is None


def test_coordinator_uses_only_the_public_names_of_sandboxes():
    """No module of coordinator/ imports a private module of sandboxes (`sandboxes._x`)."""
    offenders = []
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sandboxes._"):
                offenders.append(f"{path.name}: {node.module}")
    assert offenders == []
