"""`corral bench cooperbench` from a plain install: a fresh virtualenv, Corral installed
(not editable) without its dev extras, so no pytest beside it. The harness fetches the
pytest its tasks' tests need itself, and the embedded suite's units pass."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
# As from a user's shell: none of this test run's environment (its venv, $COLUMNS).
ENV = {k: v for k, v in os.environ.items()
       if k not in ("COLUMNS", "LINES", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}


def _source_copy(into: Path) -> Path:
    """The working tree's packages and metadata: pip builds a local directory in place,
    which would write build files into the repository."""
    into.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, into / name)
    for package in ("coordinator", "agents", "sandboxes", "bench"):
        shutil.copytree(ROOT / package, into / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return into


@pytest.mark.timeout(1800)
def test_the_embedded_suite_passes_from_an_install_without_dev_extras(tmp_path: Path) -> None:
    """In a fresh virtualenv holding Corral and its runtime dependencies only, a subset
    of the embedded suite (pair 1-3 of every task in every setting: each task's
    environment is prepared) runs and exits 0; no unit errors, and the units that pass
    in a development install pass here (kvstore's, shapes' and textkit's)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=ENV)
    py = venv / "bin" / "python"
    src = _source_copy(tmp_path / "src")
    install = subprocess.run([str(py), "-m", "pip", "install", "--quiet", str(src)], env=ENV,
                             capture_output=True, text=True, timeout=1200)
    assert install.returncode == 0, install.stdout + install.stderr
    # A plain install: pytest is a dev extra.
    assert subprocess.run([str(py), "-c", "import pytest"], env=ENV,
                          capture_output=True).returncode != 0

    out = tmp_path / "out"
    r = subprocess.run([str(venv / "bin" / "corral"), "bench", "cooperbench", "--pairs", "1-3",
                        "--out", str(out)], cwd=tmp_path, env=ENV,
                       capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stdout + r.stderr
    results = [json.loads(ln) for ln in (out / "results.jsonl").read_text().splitlines()
               if ln.strip()]
    assert len(results) == 12  # 4 tasks x (solo, coop, supervised)
    assert not [x["reason"] for x in results if x["status"] == "error"]
    passing = {(x["task"], x["setting"]) for x in results if x["status"] == "passed"}
    for task in ("kvstore", "shapes", "textkit"):
        for setting in ("solo", "coop", "supervised"):
            assert (f"mini_{task}_task/task1", setting) in passing, (task, setting)
    assert (out / "cache" / "toolchains").is_dir()  # pytest came from the package index
