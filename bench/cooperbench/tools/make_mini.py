"""Write the bundled mini suite (bench/data/cooperbench-mini) from `mini_libs.py`.

For each library: a git repository with one base commit (fixed author and dates, so
the commit id is stable), shipped as `repos/<name>.bundle`; for each feature, the
edits applied to a checkout and `git diff` taken: files under tests/ go to tests.patch,
the rest to feature.patch. Each gold feature is checked: its tests fail on base and
pass with its patch.

    python -m bench.cooperbench.tools.make_mini [--check-only]
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.cooperbench._repos import git
from bench.cooperbench.tools.mini_groups import GROUPS
from bench.cooperbench.tools.mini_libs import LIBS, Edit

OUT = Path(__file__).resolve().parents[2] / "data" / "cooperbench-mini"

RUNNER = """#!/bin/bash

set -e

# Cleanup function
cleanup() {{
    echo "Cleaning up repository..."
    if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
        git reset --hard HEAD 2>/dev/null || true
        git clean -fdx 2>/dev/null || true
        echo "Repository cleaned."
    fi
}}

trap cleanup EXIT INT TERM

# Get input params
TEST_PATCH="$1"
FEATURE_PATCH="$2"

if [[ -z "$TEST_PATCH" ]]; then
    echo "Usage: docker run -v \\$(pwd):/patches <image> <test_patch> [feature_patch]"
    exit 1
fi

cd /workspace/repo

# Ensure we start with a clean state
echo "Ensuring clean repository state..."
git reset --hard HEAD
git clean -fdx

# Apply feature patch if provided
if [[ -n "$FEATURE_PATCH" ]]; then
    echo "Applying feature patch: $FEATURE_PATCH"
    git apply --ignore-whitespace --ignore-space-change "/patches/$FEATURE_PATCH" \\
        || git apply --3way "/patches/$FEATURE_PATCH"
fi

# Apply test patch
echo "Applying test patch: $TEST_PATCH"
git apply --ignore-whitespace --ignore-space-change "/patches/$TEST_PATCH" \\
    || git apply --3way "/patches/$TEST_PATCH"

# Install dependencies (SYSTEM PYTHON)
echo "Installing dependencies..."
pip install pytest

# Run tests
echo "Running tests..."
python -m pytest {tests} -v

echo "Test execution completed!"
"""

SETUP = """#!/bin/bash
# Setup script for the mini suite's {name} task (bundled with Corral)

REPO_NAME="{name}"
BASE_COMMIT="{base}"

if [ ! -d "$REPO_NAME" ]; then
    git clone https://github.com/corral-mini/{name} "$REPO_NAME"
fi
cd "$REPO_NAME"
git checkout "$BASE_COMMIT"
"""

DOCKERFILE = """FROM python:3.11-slim
RUN apt-get update && apt-get install -y git && rm -rf /var/lib/apt/lists/*
RUN pip install pytest
WORKDIR /workspace/repo
COPY runner.sh /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/runner.sh"]
"""


def _apply(root: Path, edits: list[Edit]) -> None:
    for path, old, new in edits:
        p = root / path
        if not old:
            text = p.read_text() if p.exists() else ""
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text + new)
            continue
        text = p.read_text()
        if text.count(old) != 1:
            raise SystemExit(f"edit of {path}: the old text occurs {text.count(old)} times")
        p.write_text(text.replace(old, new))


def _diff(repo: Path, paths: list[str] | None = None) -> str:
    git(repo, "add", "-A")
    return git(repo, "diff", "--cached", "base", "--", *(paths or ["."])).stdout


def _pytest(repo: Path, tests: str) -> bool:
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", tests],
                       cwd=repo, capture_output=True, text=True,
                       env={"PYTHONDONTWRITEBYTECODE": "1", "PATH": "/usr/bin:/bin"})
    return r.returncode == 0


def make(out: Path) -> None:
    if out.exists():
        shutil.rmtree(out)
    (out / "repos").mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, lib in LIBS.items():
            repo = Path(tmp) / name
            repo.mkdir()
            git(repo, "init", "-q", "-b", "main")
            for path, text in lib["base"].items():
                (repo / path).parent.mkdir(parents=True, exist_ok=True)
                (repo / path).write_text(text)
            (repo / ".gitignore").write_text("__pycache__/\n.pytest_cache/\n")
            git(repo, "add", "-A")
            git(repo, "commit", "-q", "-m", f"{lib['title']}")
            git(repo, "branch", "base")
            base = git(repo, "rev-parse", "HEAD").stdout.strip()
            git(repo, "bundle", "create", "-q", str(out / "repos" / f"{name}.bundle"), "main")
            task = out / "dataset" / f"mini_{name}_task" / "task1"
            task.mkdir(parents=True)
            (task / "setup.sh").write_text(SETUP.format(name=name, base=base))
            (task / "runner.sh").write_text(RUNNER.format(tests=lib["tests"]))
            (task / "run_tests.sh").write_text(RUNNER.format(tests=lib["tests"]))
            (task / "Dockerfile").write_text(DOCKERFILE)
            for i, feat in enumerate(lib["features"], 1):
                git(repo, "checkout", "-q", "-f", "base")
                git(repo, "clean", "-fdxq")
                _apply(repo, feat["edits"])
                patch = _diff(repo)
                git(repo, "reset", "-q", "--hard", "base")
                _apply(repo, feat["tests"])
                tests = _diff(repo)
                fdir = task / f"feature{i}"
                fdir.mkdir()
                (fdir / "feature.md").write_text(f"# {feat['title']}\n\n{feat['md']}\n")
                (fdir / "feature.patch").write_text(patch)
                (fdir / "tests.patch").write_text(tests)
                # The hidden tests must fail on base and pass with the gold patch.
                if _pytest(repo, lib["tests"]):
                    raise SystemExit(f"{name} feature {i}: tests pass without the feature")
                _apply(repo, feat["edits"])
                if not _pytest(repo, lib["tests"]):
                    raise SystemExit(f"{name} feature {i}: tests fail with the gold patch")
                git(repo, "reset", "-q", "--hard", "base")
            # combined.patch: every feature's edits in order, where they still apply.
            git(repo, "clean", "-fdxq")
            for feat in lib["features"]:
                for edit in feat["edits"]:
                    try:
                        _apply(repo, [edit])
                    except SystemExit:
                        pass
            (task / "combined.patch").write_text(_diff(repo))
            git(repo, "reset", "-q", "--hard", "base")
            _check_groups(name, task, repo, Path(tmp) / f"{name}-fold")
    _write_subset(out / "dataset" / "subsets" / "groups.json")
    print(f"wrote {out}")


def _check_groups(name: str, task: Path, repo: Path, work: Path) -> None:
    """Each listed group of `name` conflicts at the fold step GROUPS says (or merges)."""
    from bench.cooperbench._census import GoldFold, script_filter

    fold = GoldFold.create(work, repo, git(repo, "rev-parse", "base").stdout.strip())
    for group, step, why in GROUPS.get(name, []):
        patches = [script_filter((task / f"feature{f}" / "feature.patch").read_text())
                   for f in group]
        applies, got, _ = fold.run(patches)
        if got != step or set(applies) != {"applied"}:
            raise SystemExit(f"{name} {group}: the fold conflicts at step {got}, not {step} "
                             f"({why}); applies {applies}")


def _write_subset(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"name": "groups",
            "description": "Groups of 3 and 4 features of the mini suite (Corral's "
                           "`bench/cooperbench/tools/mini_groups.py`)",
            "tasks": [{"repo": f"mini_{name}_task", "task_id": 1,
                       "groups": [list(g) for g, _, _ in groups]}
                      for name, groups in GROUPS.items()]}
    path.write_text(json.dumps(data, indent=2) + "\n")


if __name__ == "__main__":
    make(OUT)
