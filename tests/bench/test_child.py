"""bench._child: a benchmark phase run in a child interpreter, its figures the last
JSON line it printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench._child import run_child


def _module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, source: str) -> str:
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return name


def test_the_last_json_line_is_the_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    name = _module(tmp_path, monkeypatch, "phase_ok", (
        "import json, sys\nprint('warming up')\nprint(json.dumps({'n': 1}))\n"
        "print(json.dumps({'n': int(sys.argv[1])}))\n"))
    assert run_child(name, ["7"], timeout=30) == {"n": 7}


def test_a_child_that_prints_no_figures_is_named_with_its_stderr(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    name = _module(tmp_path, monkeypatch, "phase_broken",
                   "import sys\nprint('boom: the disk is gone', file=sys.stderr)\nsys.exit(3)\n")
    with pytest.raises(RuntimeError, match=r"phase_broken  failed \(3\).*boom: the disk") as e:
        run_child(name, [], timeout=30)
    log = str(e.value).split("is in ", 1)[1].split(";", 1)[0]
    assert "boom" in Path(log).read_text()
