"""tests/README.md maps every module that has behaviour to the tests that exercise it:
none is missing, no listed test file is gone, and an untested module says why."""

from __future__ import annotations

import ast
import re

from tests.layers import PACKAGES, ROOT, modules

MAP = ROOT / "tests" / "README.md"
ROW = re.compile(r"^\| `([\w.]+)` \| (.+) \|$")


def _rows() -> dict[str, str]:
    return {m.group(1): m.group(2) for line in MAP.read_text().splitlines()
            if (m := ROW.match(line))}


def _with_behaviour() -> set[str]:
    found = set()
    for package in PACKAGES:
        for name, path in modules(package).items():
            tree = ast.parse(path.read_text())
            if any(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                   for n in tree.body):
                found.add(name)
    return found


def test_every_module_with_behaviour_is_mapped():
    missing = sorted(_with_behaviour() - _rows().keys())
    assert missing == [], f"add them to {MAP.relative_to(ROOT)} with the tests that cover them"


def test_the_map_names_only_modules_and_test_files_that_exist():
    rows = _rows()
    assert sorted(rows.keys() - _with_behaviour()) == []
    for module, cell in rows.items():
        if cell.startswith("*untested*"):
            assert len(cell) > len("*untested*: ") + 20, f"{module}: say why it is untested"
            continue
        files = re.findall(r"`([^`]+)`", cell)
        assert files, module
        for f in files:
            assert (ROOT / f).is_file(), f"{module}: {f} does not exist"
