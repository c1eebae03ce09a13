"""`agents/` imports one way: no circle among its modules (imports for types only and
imports inside functions count), no private name of `coordinator` or `sandboxes`, and
nothing of `bench` (which sits above it).

The body of `if __name__ == "__main__":` does not count: it runs only when the file is the
program (`python -m agents.model_server`), as the module `__main__`, so what it imports is
not imported by the module of that name.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import agents

PACKAGE = Path(agents.__file__).parent
LOWER = ("coordinator", "sandboxes")
"""The packages below `agents`: it may use their public names only."""


@dataclass(frozen=True, slots=True)
class Import:
    module: str
    """The importing module, e.g. agents.providers.openai."""
    target: str
    """The module imported from, absolute."""
    names: tuple[str, ...]
    """The names imported from it (empty for `import target`)."""
    line: int

    def __str__(self) -> str:
        what = f"from {self.target} import {', '.join(self.names)}" if self.names else (
            f"import {self.target}")
        return f"{self.module}:{self.line}: {what}"


def modules(root: Path, package: str) -> dict[str, Path]:
    """Every module of the package at `root`, by dotted name (a package is its __init__)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = (package, *path.relative_to(root).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(root: Path, package: str) -> Iterator[Import]:
    """Every import statement of every module under `root`, wherever it is in the file."""
    for name, path in modules(root, package).items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(), str(path))
        tree.body = [n for n in tree.body if not _main_block(n)]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield Import(name, alias.name, (), node.lineno)
            elif isinstance(node, ast.ImportFrom):
                yield Import(name, _absolute(name, is_package, node),
                             tuple(a.name for a in node.names), node.lineno)


def _main_block(node: ast.stmt) -> bool:
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__"
            and any(isinstance(c, ast.Constant) and c.value == "__main__"
                    for c in node.test.comparators))


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    base = base[:len(base) - node.level + (1 if is_package else 0)]
    return ".".join([*base, *([node.module] if node.module else [])])


def graph(root: Path, package: str) -> dict[str, dict[str, Import]]:
    """Module -> the package's modules it imports, with one import statement that does it.
    `from pkg import mod` imports the module pkg.mod, and `pkg` itself only when it also
    takes a name that is not a module: like `import pkg.mod`, loading a module's parent
    package on the way is not an edge."""
    known = set(modules(root, package))
    edges: dict[str, dict[str, Import]] = {m: {} for m in known}
    for imp in imports(root, package):
        submodules = [f"{imp.target}.{n}" for n in imp.names if f"{imp.target}.{n}" in known]
        names_of_target = not imp.names or len(submodules) < len(imp.names)
        for target in [*([imp.target] if names_of_target else []), *submodules]:
            if target in known and target != imp.module:
                edges[imp.module].setdefault(target, imp)
    return edges


def circles(edges: dict[str, dict[str, Import]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each as one circle
    through the group, starting and ending at its first module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for dep in sorted(edges[node]):
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return [_circle_through(edges, set(g), g[0]) for g in groups]


def _circle_through(edges: dict[str, dict[str, Import]], group: set[str], start: str
                    ) -> list[str]:
    """A shortest path from `start` back to itself inside `group` (breadth first)."""
    came: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for dep in sorted(edges[node]):
                if dep not in group or dep in came:
                    continue
                came[dep] = node
                if dep == start:
                    path = [start]
                    while path[-1] != start or len(path) == 1:
                        path.append(came[path[-1]])
                    return path[::-1]
                following.append(dep)
        frontier = following
    raise AssertionError(f"{start} is in no circle of {sorted(group)}")


def private_imports(root: Path, package: str) -> list[Import]:
    """Imports of a private module or name (`_x`, not `__x__`) of the lower packages."""
    def private(name: str) -> bool:
        return name.startswith("_") and not name.endswith("__")

    return [imp for imp in imports(root, package)
            if imp.target.split(".")[0] in LOWER
            and (any(private(p) for p in imp.target.split(".")) or any(map(private, imp.names)))]


def bench_imports(root: Path, package: str) -> list[Import]:
    """Imports of `bench`, the package above."""
    return [imp for imp in imports(root, package) if imp.target.split(".")[0] == "bench"]


def _explain(edges: dict[str, dict[str, Import]], circle: list[str]) -> str:
    steps = [str(edges[a][b]) for a, b in itertools.pairwise(circle)]
    return " -> ".join(circle) + "\n    " + "\n    ".join(steps)


def test_agents_has_no_import_circle() -> None:
    """No module of agents/ imports, however indirectly, a module that imports it (imports
    under `if TYPE_CHECKING:` and inside functions count)."""
    edges = graph(PACKAGE, "agents")
    found = circles(edges)
    assert not found, "import circles in agents/:\n" + "\n".join(
        _explain(edges, c) for c in found)


def test_agents_uses_only_public_names_below_it() -> None:
    """agents/ imports no `_private` module or name of coordinator or sandboxes."""
    found = private_imports(PACKAGE, "agents")
    assert not found, "private imports:\n" + "\n".join(map(str, found))


def test_agents_does_not_import_bench() -> None:
    """agents/ imports nothing of bench (bench builds on agents, not the reverse)."""
    found = bench_imports(PACKAGE, "agents")
    assert not found, "bench imports:\n" + "\n".join(map(str, found))


def test_the_checks_see_what_they_guard(tmp_path: Path) -> None:
    """On a small package with a type-only circle, a function-local circle, a private
    import, a relative `from . import` and a bench import, each check finds exactly it."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .a import A\n")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from .b import B\nA = 1\n")
    (pkg / "b.py").write_text("from pkg import a\nfrom coordinator._trace import Trace\n"
                              "from coordinator import Scope, __version__\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "c.py").write_text("def f():\n    from .. import sub\n    from . import d\n")
    (pkg / "sub" / "d.py").write_text("import bench.cli\nfrom sandboxes import _exec\n"
                                      "from ..sub import c\n")
    (pkg / "main.py").write_text("import pkg.a\nif __name__ == '__main__':\n"
                                 "    from pkg import b\n")
    edges = graph(pkg, "pkg")
    assert edges["pkg.b"].keys() == {"pkg.a"} and edges["pkg.a"].keys() == {"pkg.b"}
    assert edges["pkg.main"].keys() == {"pkg.a"}
    assert circles(edges) == [["pkg.a", "pkg.b", "pkg.a"], ["pkg.sub.c", "pkg.sub.d",
                                                           "pkg.sub.c"]]
    assert [str(i) for i in private_imports(pkg, "pkg")] == [
        "pkg.b:2: from coordinator._trace import Trace",
        "pkg.sub.d:2: from sandboxes import _exec"]
    assert [str(i) for i in bench_imports(pkg, "pkg")] == ["pkg.sub.d:1: import bench.cli"]


def test_modules_and_functions_stay_readable() -> None:
    """No module of agents/ passes 500 lines and no function 80 (STYLE: a longer one is
    usually two concepts)."""
    long = []
    for name, path in modules(PACKAGE, "agents").items():
        text = path.read_text()
        if text.count("\n") > 500:
            long.append(f"{name}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > 80:
                    long.append(f"{name}.{node.name}: {size} lines")
    assert not long, "too long:\n" + "\n".join(long)
