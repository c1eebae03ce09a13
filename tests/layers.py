"""The import graph of Corral's packages, read from the source with `ast`, for the
layering tests of every package (tests/<package>/test_layers.py).

Every import counts: at module level, inside functions, and under
`if TYPE_CHECKING:` (a type-only import is still an arrow a reader follows); only
an `if __name__ == "__main__":` block is left out (it runs as `__main__`, never
as the module a circle would pass through).
A module is named by its dotted path (`coordinator.store._trace`); an import
of a name from a package (`from coordinator import Scope`) is an arrow to the
package's face (`coordinator`), an import of a submodule (`from . import
_history`) an arrow to that module.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("sandboxes", "coordinator", "agents", "bench")
"""Bottom up: each may import only those before it."""


def modules(package: str, root: Path = ROOT) -> dict[str, Path]:
    """Every module of `package` (a folder of `root`), by dotted name (a package by
    its own name)."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _target(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _main_block(node: ast.AST) -> bool:
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__"
            and any(isinstance(c, ast.Constant) and c.value == "__main__"
                    for c in node.test.comparators))


@functools.cache  # every layering test reads the same files: parse each once
def _nodes(path: Path) -> list[ast.AST]:
    """Every node of the module at `path`, but those of `if __name__ == "__main__":`."""
    out: list[ast.AST] = []
    todo: list[ast.AST] = [ast.parse(path.read_text(), str(path))]
    while todo:
        node = todo.pop()
        out.append(node)
        todo.extend(child for child in ast.iter_child_nodes(node) if not _main_block(child))
    return out


def imports(module: str, path: Path, known: Mapping[str, Path]) -> set[str]:
    """The modules `module` (at `path`) imports, each resolved to the deepest
    module in `known` or, outside the project, to its top-level name."""
    found: set[str] = set()
    for node in _nodes(path):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _target(module, path.name == "__init__.py", node)
            names = [f"{target}.{a.name}" if f"{target}.{a.name}" in known else target
                     for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in known and "." in name:
                name = name.rpartition(".")[0]
            found.add(name)
    found.discard(module)
    return found


def graph(packages: Iterable[str] = PACKAGES, root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the modules it imports, for every module of `packages`."""
    known: dict[str, Path] = {}
    for package in {*PACKAGES, *packages}:
        known.update(modules(package, root))
    return {m: imports(m, p, known) for m, p in known.items()
            if m.split(".")[0] in set(packages)}


def cycle(edges: Mapping[str, Iterable[str]]) -> list[str] | None:
    """One circle of arrows in `edges` (first and last the same module), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(edges.get(node, ())):
            if state.get(dep) == 1:
                return [*stack[stack.index(dep):], dep]
            if dep in edges and dep not in state and (found := visit(dep)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


def private_imports(package: str, root: Path = ROOT) -> list[str]:
    """`module -> name` for each import by `package` of another project package's
    private module or name (a part starting with `_`)."""
    found = []
    for module, path in modules(package, root).items():
        for node in _nodes(path):
            if isinstance(node, ast.Import):
                targets = [(a.name, None) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                targets = [(node.module or "", a.name) for a in node.names]
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                targets = [(node.value.id, node.attr)]  # `coordinator._trace` in code
            else:
                continue
            for target, name in targets:
                top = target.split(".")[0]
                if top == package or top not in PACKAGES:
                    continue
                parts = [*target.split(".")[1:], *([name] if name else [])]
                if any(p.startswith("_") and not p.startswith("__") for p in parts):
                    found.append(f"{module} -> {target}{'.' + name if name else ''}")
    return found


def upward(package: str, root: Path = ROOT) -> list[str]:
    """`module -> module` for each import by `package` of a package above it."""
    above = set(PACKAGES[PACKAGES.index(package) + 1:]) if package in PACKAGES else set()
    return [f"{m} -> {d}" for m, deps in graph([package], root).items() for d in sorted(deps)
            if d.split(".")[0] in above]
