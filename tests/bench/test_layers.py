"""bench/ imports one way: no circle among its modules (imports under
`if TYPE_CHECKING:` and inside functions count too), and of the packages it measures
(coordinator, sandboxes, agents) it uses only the public names.

A module's `if __name__ == "__main__":` block is left out: it runs only when the file
is the `__main__` script (`python -m bench.replay` is `corral bench replay`), a module
of its own that nothing imports, so its import of `bench.cli` closes no circle."""

from __future__ import annotations

import ast
from pathlib import Path

import bench

ROOT = Path(bench.__file__).parent
OTHERS = ("coordinator", "sandboxes", "agents")


def _name(path: Path) -> str:
    """The dotted module name of a file under bench/ (a package by its own name)."""
    parts = ["bench", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _is_package(module: str) -> bool:
    return MODULES.get(module, Path()).name == "__init__.py"


def _absolute(module: str, node: ast.ImportFrom) -> str:
    """The module an `ImportFrom` names, relative imports resolved against `module`."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if _is_package(module) else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _is_main_block(node: ast.AST) -> bool:
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    t = node.test
    return (isinstance(t.left, ast.Name) and t.left.id == "__name__"
            and len(t.comparators) == 1 and isinstance(t.comparators[0], ast.Constant)
            and t.comparators[0].value == "__main__")


def _nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of `tree` but those of its `if __name__ == "__main__":` blocks."""
    out: list[ast.AST] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        if _is_main_block(node):
            continue
        out.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return out


def _imported(module: str, tree: ast.AST) -> list[tuple[str, str | None]]:
    """Every (module, name) `tree` imports, wherever the statement is (but a `__main__`
    block); name is None for `import x.y`."""
    out: list[tuple[str, str | None]] = []
    for node in _nodes(tree):
        if isinstance(node, ast.Import):
            out.extend((a.name, None) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _absolute(module, node)
            out.extend((target, a.name) for a in node.names)
    return out


def imports_of(module: str, tree: ast.AST) -> set[str]:
    """The modules of bench/ that `module` imports (a `from pkg import mod` names mod)."""
    deps: set[str] = set()
    for target, name in _imported(module, tree):
        if name is not None and f"{target}.{name}" in MODULES:
            deps.add(f"{target}.{name}")
        elif target in MODULES:
            deps.add(target)
    return deps - {module}


def graph() -> dict[str, set[str]]:
    return {m: imports_of(m, ast.parse(p.read_text())) for m, p in MODULES.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """A circle of imports in `edges`, as the modules round it (first repeated at the
    end), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(edges.get(node, ())):
            if state.get(dep) == 1:
                return [*stack[stack.index(dep):], dep]
            if dep not in state and (found := visit(dep)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


def private_imports(module: str, tree: ast.AST) -> list[str]:
    """Each private name (`_x` module or attribute) of coordinator, sandboxes or agents
    that `tree` imports or reaches as an attribute of an imported package."""
    found = []
    aliases: dict[str, str] = {}
    for target, name in _imported(module, tree):
        if target.split(".")[0] not in OTHERS:
            continue
        parts = [*target.split("."), *([name] if name else [])]
        if any(p.startswith("_") for p in parts[1:]):
            found.append(".".join(parts))
    for node in _nodes(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in OTHERS:
                    aliases[a.asname or a.name.split(".")[0]] = a.name
    for node in _nodes(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and isinstance(node.value, ast.Name) and node.value.id in aliases):
            found.append(f"{aliases[node.value.id]}.{node.attr}")
    return found


def test_bench_modules_import_without_a_circle() -> None:
    """No circle of imports among bench/'s modules, type-only and function-local
    imports included."""
    cycle = find_cycle(graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_bench_uses_only_public_names_of_other_packages() -> None:
    """No module of bench/ imports a private module or name of coordinator, sandboxes
    or agents."""
    offenders = [f"{m}: {name}" for m, p in MODULES.items()
                 for name in private_imports(m, ast.parse(p.read_text()))]
    assert offenders == []


def test_the_checks_find_what_they_look_for() -> None:
    """The cycle check finds a circle (also one made by a type-only or a function-local
    import), and the private-name check finds each way of importing a private name."""
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    src = ("from typing import TYPE_CHECKING\n"
           "if TYPE_CHECKING:\n    from ._records import PairResult\n"
           "def f():\n    from . import _store\n"
           "if __name__ == '__main__':\n    from bench.cli import app\n")
    assert imports_of("bench.cooperbench._report", ast.parse(src)) == {
        "bench.cooperbench._records", "bench.cooperbench._store"}
    src = ("from coordinator._merge import merge_texts\nfrom coordinator import _ignore\n"
           "from sandboxes import _exec\nimport agents._x\nimport coordinator\n"
           "coordinator._trace\nfrom coordinator.store import merge_texts\n"
           "from coordinator import Scope\n")
    assert sorted(private_imports("bench.x", ast.parse(src))) == [
        "agents._x", "coordinator._ignore", "coordinator._merge.merge_texts",
        "coordinator._trace", "sandboxes._exec"]


COOPERBENCH = ROOT / "cooperbench"


def oversized(path: Path, *, module_lines: int = 500, function_lines: int = 80) -> list[str]:
    """What in `path` is too long to read in one go: the module over `module_lines`
    lines (unless its docstring gives the reason, a line starting "Over 500 lines:"),
    each function over `function_lines`."""
    text = path.read_text()
    tree = ast.parse(text)
    found = []
    doc = ast.get_docstring(tree) or ""
    if len(text.splitlines()) > module_lines and "Over 500 lines:" not in doc:
        found.append(f"{path.name}: {len(text.splitlines())} lines")
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > function_lines:
                found.append(f"{path.name}: {node.name} is {length} lines")
    return found


def test_cooperbench_modules_and_functions_are_short() -> None:
    """No module of bench/cooperbench/ over 500 lines without a reason in its
    docstring, no function over 80 lines."""
    assert [f for p in sorted(COOPERBENCH.rglob("*.py")) for f in oversized(p)] == []


def test_the_size_check_finds_a_long_function(tmp_path: Path) -> None:
    """A function of 81 lines and a module over 500 are found; a reason in the
    docstring lets the module pass."""
    body = "".join(f"    x{i} = {i}\n" for i in range(80))
    long = tmp_path / "long.py"
    long.write_text('"""A module."""\n\n\ndef f():\n' + body + "\n" * 420)
    assert oversized(long) == ["long.py: 504 lines", "long.py: f is 81 lines"]
    long.write_text('"""A module.\n\nOver 500 lines: a reason."""\n' + "\n" * 505)
    assert oversized(long) == []
