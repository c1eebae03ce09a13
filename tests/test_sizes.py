"""What a newcomer can carry: no module of Corral's packages over 500 lines unless its
docstring says why (a line starting "Over 500 lines:"), and no function over 80 lines."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.layers import PACKAGES, ROOT, modules

REASON = "Over 500 lines:"


def oversized(path: Path, *, module_lines: int = 500, function_lines: int = 80) -> list[str]:
    """What in `path` is too long to read in one go: the module over `module_lines`
    lines (unless its docstring gives the reason), each function over `function_lines`."""
    text = path.read_text()
    tree = ast.parse(text)
    found = []
    lines = len(text.splitlines())
    if lines > module_lines and REASON not in (ast.get_docstring(tree) or ""):
        found.append(f"{path.name}: {lines} lines")
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > function_lines:
                found.append(f"{path.name}: {node.name} is {length} lines")
    return found


def test_no_module_or_function_is_too_long():
    found = [f"{path.relative_to(ROOT).parent}/{f}" for package in PACKAGES
             for path in modules(package).values() for f in oversized(path)]
    assert found == [], f"split them (a long module may say why: {REASON!r})"


def test_the_size_check_finds_a_long_function(tmp_path: Path) -> None:
    """A function of 81 lines and a module over 500 are found; a reason in the
    docstring lets the module pass."""
    body = "".join(f"    x{i} = {i}\n" for i in range(80))
    long = tmp_path / "long.py"
    long.write_text('"""A module."""\n\n\ndef f():\n' + body + "\n" * 420)
    assert oversized(long) == ["long.py: 504 lines", "long.py: f is 81 lines"]
    long.write_text('"""A module.\n\nOver 500 lines: a reason."""\n' + "\n" * 505)
    assert oversized(long) == []
