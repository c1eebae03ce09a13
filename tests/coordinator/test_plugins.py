"""`coordinator.plugins`: plug-ins by entry point name or `module:attr` path, against a real
installed distribution (a `*.dist-info` directory on `sys.path`, found by importlib.metadata)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.plugins import load_plugin, plugin_names

GROUP = "corral.test-plugins"


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A distribution `corral-test-plugins` registering four entry points in GROUP: two that
    load, one whose module imports a package that is not installed, one naming no attribute."""
    site = tmp_path / "site"
    (site / "corral_test_plugins").mkdir(parents=True)
    (site / "corral_test_plugins" / "__init__.py").write_text(
        "class Greeter:\n    def hello(self):\n        return 'hello'\n\n"
        "def answer():\n    return 42\n")
    (site / "corral_test_plugins" / "broken.py").write_text(
        "import corral_no_such_package_anywhere\n")
    info = site / "corral_test_plugins-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: corral-test-plugins\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        f"[{GROUP}]\n"
        "answer = corral_test_plugins:answer\n"
        "greeter = corral_test_plugins:Greeter\n"
        "fancy = corral_test_plugins.broken:thing\n"
        "hollow = corral_test_plugins:nothing_here\n")
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    yield site
    for name in [m for m in sys.modules if m.startswith("corral_test_plugins")]:
        del sys.modules[name]


def test_names_are_the_groups_entry_points(installed: Path) -> None:
    """plugin_names lists the group's entry points, sorted; another group's are not in it."""
    assert plugin_names(GROUP) == ["answer", "fancy", "greeter", "hollow"]
    assert "answer" not in plugin_names("corral.test-plugins-other")


def test_an_entry_point_name_loads_its_object(installed: Path) -> None:
    """A name in the group loads the object its entry point names."""
    answer = load_plugin(GROUP, "answer", what="thing")
    assert callable(answer) and answer() == 42
    greeter = load_plugin(GROUP, "greeter", what="thing")
    assert isinstance(greeter, type) and greeter().hello() == "hello"


def test_a_module_attr_path_loads_without_an_entry_point(installed: Path) -> None:
    """`module:attr` loads any importable attribute, dotted ones too, whatever the group."""
    answer = load_plugin("corral.no-such-group", "corral_test_plugins:answer", what="thing")
    assert callable(answer) and answer() == 42
    hello = load_plugin(GROUP, "corral_test_plugins:Greeter.hello", what="thing")
    assert callable(hello) and getattr(hello, "__qualname__", "") == "Greeter.hello"


def test_an_unknown_name_lists_the_installed_ones(installed: Path) -> None:
    """A name that is neither an entry point nor a path is a LookupError naming the
    installed choices and the path form."""
    with pytest.raises(LookupError, match="no widget 'nobody'") as e:
        load_plugin(GROUP, "nobody", what="widget")
    assert "answer, fancy, greeter, hollow" in str(e.value) and "module:attr" in str(e.value)
    with pytest.raises(LookupError, match="none installed"):
        load_plugin("corral.test-plugins-empty", "nobody", what="widget")


def test_a_broken_import_names_the_extra(installed: Path) -> None:
    """An entry point whose module fails to import is a LookupError that names the missing
    module and the extra to install; a path to a missing module names the module."""
    with pytest.raises(LookupError) as e:
        load_plugin(GROUP, "fancy", what="widget")
    text = str(e.value)
    assert "corral_no_such_package_anywhere" in text
    assert "pip install 'corral-test-plugins[fancy]'" in text
    assert isinstance(e.value.__cause__, ImportError)
    with pytest.raises(LookupError, match="cannot import corral_test_plugins_missing"):
        load_plugin(GROUP, "corral_test_plugins_missing:x", what="widget")


def test_a_missing_attribute_is_named(installed: Path) -> None:
    """A path or an entry point naming an attribute its module lacks is a LookupError
    naming the attribute."""
    with pytest.raises(LookupError, match=r"has no attribute 'Greeter\.bye'"):
        load_plugin(GROUP, "corral_test_plugins:Greeter.bye", what="widget")
    with pytest.raises(LookupError, match="nothing_here"):
        load_plugin(GROUP, "hollow", what="widget")
