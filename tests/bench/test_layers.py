"""bench/ sits on everything else: no circle among its modules (type-only and
function-local imports count; see tests/layers.py), and of the packages it measures
(coordinator, sandboxes, agents) it uses only the public names."""

from __future__ import annotations

from tests.layers import PACKAGES, cycle, graph, private_imports, upward


def test_bench_modules_import_without_a_circle() -> None:
    edges = {m: {d for d in deps if d.startswith("bench")}
             for m, deps in graph(["bench"]).items()}
    found = cycle(edges)
    assert found is None, "import circle: " + " -> ".join(found or [])


def test_bench_uses_only_public_names_of_other_packages() -> None:
    assert private_imports("bench") == []


def test_the_packages_import_one_way() -> None:
    """Across the project: no package imports one above it (sandboxes < coordinator <
    agents < bench), and there is no circle among all the modules."""
    for package in PACKAGES:
        assert upward(package) == [], package
    edges = graph()
    found = cycle({m: {d for d in deps if d in edges} for m, deps in edges.items()})
    assert found is None, " -> ".join(found or [])
