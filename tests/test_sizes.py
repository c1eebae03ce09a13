"""What a newcomer can carry: no module of Corral's packages over 500 lines unless its
docstring says why ("Over 500 lines: ..."), and no function over 80 lines."""

from __future__ import annotations

import ast

from tests.layers import PACKAGES, ROOT, modules

MODULE_LINES = 500
FUNCTION_LINES = 80
REASON = "Over 500 lines:"


def _sizes() -> tuple[list[str], list[str]]:
    long_modules, long_functions = [], []
    for package in PACKAGES:
        for path in modules(package).values():
            text = path.read_text()
            tree = ast.parse(text)
            name = str(path.relative_to(ROOT))
            if text.count("\n") > MODULE_LINES and REASON not in (ast.get_docstring(tree) or ""):
                long_modules.append(f"{name}: {text.count(chr(10))} lines")
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = (node.end_lineno or node.lineno) - node.lineno + 1
                    if lines > FUNCTION_LINES:
                        long_functions.append(f"{name}:{node.lineno} {node.name}: {lines} lines")
    return long_modules, long_functions


def test_no_module_is_long_without_a_reason():
    assert _sizes()[0] == [], f"split them, or say why in the docstring ({REASON!r})"


def test_no_function_is_over_80_lines():
    assert _sizes()[1] == []
