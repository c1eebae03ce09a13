"""sandboxes/ is the bottom package: it imports nothing of Corral's others, and its
modules import without a circle (type-only and function-local imports count)."""

from __future__ import annotations

from tests.layers import cycle, graph, private_imports, upward


def test_sandboxes_import_nothing_above_them():
    assert upward("sandboxes") == []
    assert private_imports("sandboxes") == []


def test_sandboxes_modules_import_without_a_circle():
    edges = {m: {d for d in deps if d.startswith("sandboxes")}
             for m, deps in graph(["sandboxes"]).items()}
    found = cycle(edges)
    assert found is None, " -> ".join(found or [])

