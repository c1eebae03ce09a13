"""coordinator/ is six layers, each a subpackage importing only those before it, with
no circle of imports anywhere (type-only and function-local imports count)."""

from __future__ import annotations

from tests.layers import cycle, graph, private_imports, upward

LAYERS = ("records", "store", "policies", "scopes", "control", "server")
"""Bottom up; the modules at the top (the face, cli, client, plugins) sit above all."""


def _layer(module: str) -> int:
    if module == "coordinator.plugins":
        return -1  # the loader every layer uses: the standard library only
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in LAYERS:
        return LAYERS.index(parts[1])
    return len(LAYERS)


def _coordinator() -> dict[str, set[str]]:
    return {m: {d for d in deps if d.split(".")[0] == "coordinator"}
            for m, deps in graph(["coordinator"]).items()}


def test_no_module_imports_a_layer_above_its_own():
    """records < store < policies < scopes < control < server < the face and CLI."""
    up = [f"{m} -> {d}" for m, deps in _coordinator().items() for d in sorted(deps)
          if _layer(d) > _layer(m)]
    assert up == []


def test_the_layers_are_the_folders():
    """Every module but the top ones lives in a layer's folder."""
    top = {"coordinator", "coordinator.cli", "coordinator.cli_shared", "coordinator.client"}
    assert sorted(m for m in _coordinator() if _layer(m) == len(LAYERS)) == sorted(
        m for m in top if m in _coordinator())


def test_coordinator_modules_import_without_a_circle():
    """No circle among coordinator's modules, type-only imports included. The face
    (`coordinator/__init__`) gathers every layer, so a module below it importing
    `from coordinator import X` would be a circle: none does."""
    found = cycle(_coordinator())
    assert found is None, " -> ".join(found or [])


def test_the_plugin_loader_imports_nothing_of_coordinator():
    assert _coordinator()["coordinator.plugins"] == set()


def test_the_cycle_check_can_fail():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


def test_the_layer_check_can_fail():
    assert _layer("coordinator.server._app") > _layer("coordinator.records._effects")
    assert _layer("coordinator.cli") > _layer("coordinator.server")


def test_coordinator_imports_nothing_above_it_and_only_public_names():
    """Not agents or bench (plug-ins reach it through entry points), and of sandboxes
    only its public names."""
    assert upward("coordinator") == []
    assert private_imports("coordinator") == []
