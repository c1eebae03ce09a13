"""agents/ sits on coordinator and sandboxes: it imports nothing of bench, only their
public names, and its modules import without a circle (type-only and function-local
imports count; see tests/layers.py)."""

from __future__ import annotations

from pathlib import Path

from tests.layers import cycle, graph, private_imports, upward


def test_agents_has_no_import_circle() -> None:
    edges = {m: {d for d in deps if d.startswith("agents")}
             for m, deps in graph(["agents"]).items()}
    found = cycle(edges)
    assert found is None, " -> ".join(found or [])


def test_agents_uses_only_public_names_below_it_and_nothing_above() -> None:
    assert private_imports("agents") == []
    assert upward("agents") == []


def test_the_checks_see_what_they_guard(tmp_path: Path) -> None:
    """On a small package with a type-only circle, a function-local circle, private
    imports and a `__main__` block, each check finds exactly what is there."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .a import A\n")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from .b import B\nA = 1\n")
    (pkg / "b.py").write_text("from pkg import a\nfrom coordinator._trace import Trace\n"
                              "from coordinator import Scope, __version__\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "c.py").write_text("def f():\n    from . import d\n")
    (pkg / "sub" / "d.py").write_text("from sandboxes import _exec\nfrom ..sub import c\n")
    (pkg / "main.py").write_text("import pkg.a\nif __name__ == '__main__':\n"
                                 "    from pkg import main\n")
    edges = {m: {d for d in deps if d.startswith("pkg")}
             for m, deps in graph(["pkg"], tmp_path).items()}
    assert edges["pkg.b"] == {"pkg.a"} and edges["pkg.a"] == {"pkg.b"}
    assert edges["pkg.main"] == {"pkg.a"}  # the __main__ block is not an import of it
    assert cycle(edges) == ["pkg.a", "pkg.b", "pkg.a"]
    del edges["pkg.a"]
    assert cycle(edges) == ["pkg.sub.c", "pkg.sub.d", "pkg.sub.c"]
    assert private_imports("pkg", tmp_path) == [
        "pkg.b -> coordinator._trace.Trace", "pkg.sub.d -> sandboxes._exec"]
