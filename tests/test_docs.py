"""The documentation site builds with `mkdocs build --strict`: a broken link, a missing
page or anchor, or an API reference that does not resolve fails the suite."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _mkdocs() -> str:
    found = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip("mkdocs is not installed (pip install -e '.[docs]')")
    return found


@pytest.mark.slow
def test_docs_build_strict(tmp_path: Path) -> None:
    """`mkdocs build --strict` succeeds; its output is the failure message when it does not."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([_mkdocs(), "build", "--strict", "-d", str(tmp_path / "site")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "api" / "openapi.json").is_file()
    http = (tmp_path / "site" / "api" / "http" / "index.html").read_text()
    assert "/v1/scopes/{name}/fork" in http and "<!-- openapi -->" not in http
    assert "Coordinator" in (tmp_path / "site" / "reference" / "coordinator" /
                             "index.html").read_text()


def test_results_page_is_generated_from_the_reports(tmp_path: Path) -> None:
    """`python -m bench.results` writes the results page from the JSON reports, with the
    commit, the machine and the load beside the figures; the committed page is its output."""
    out = tmp_path / "results.md"
    subprocess.run([sys.executable, "-m", "bench.results", "-o", str(out)], cwd=ROOT,
                   check=True, capture_output=True, timeout=60)
    page = out.read_text()
    assert "| commit | cores | kernel | filesystem | load before | load after |" in page
    assert "| 10MB | fork |" in page
    assert page == (ROOT / "docs" / "results.md").read_text()


def test_the_architecture_page_draws_the_folders_there_are() -> None:
    """docs/architecture.md's picture of coordinator/ names exactly its subpackages, in
    the layering test's order (top first), and the modules at its top."""
    from tests.coordinator.test_layers import LAYERS

    page = (ROOT / "docs" / "architecture.md").read_text()
    picture = page.split("<!-- layers:", 1)[1].split("```", 2)[1]
    lines = [line for line in picture.splitlines() if line.strip()]
    assert lines[0] == "coordinator/"
    drawn = [line.split()[0].rstrip("/") for line in lines[2:]]
    folders = sorted(p.name for p in (ROOT / "coordinator").iterdir()
                     if (p / "__init__.py").exists())
    assert drawn == list(reversed(LAYERS)) and sorted(drawn) == folders
    top = {p.name for p in (ROOT / "coordinator").glob("*.py")}
    assert {w for w in lines[1].split() if w.endswith(".py")} == top
