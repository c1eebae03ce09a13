"""CooperBench's dataset on disk: tasks, features and the pairs to run.

    dataset/<repo>_task/task<N>/setup.sh        REPO_NAME, BASE_COMMIT, the clone URL
                               runner.sh        the in-container test runner
                               Dockerfile       tells the toolchain (python, golang, node, rust)
                               feature<k>/feature.md, feature.patch, tests.patch
    dataset/subsets/<name>.json                 {"tasks": [{"repo", "task_id", "pairs"}]}
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from importlib import resources
from itertools import combinations
from pathlib import Path
from typing import Literal

__all__ = [
    "Feature",
    "Language",
    "Pair",
    "Task",
    "load_tasks",
    "mini_suite",
    "select_pairs",
    "test_command",
]

Language = Literal["python", "go", "typescript", "rust", "unknown"]


@dataclass(frozen=True, slots=True)
class Feature:
    id: int
    path: Path

    @property
    def description(self) -> str:
        return (self.path / "feature.md").read_text()

    @property
    def patch(self) -> str:
        return (self.path / "feature.patch").read_text()

    @property
    def tests(self) -> str:
        return (self.path / "tests.patch").read_text()


@dataclass(frozen=True)
class Task:
    """One task directory: a repository at a base commit and its features."""

    repo: str
    """The dataset's directory name, e.g. pallets_click_task."""
    id: int
    path: Path
    features: dict[int, Feature] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.repo}/task{self.id}"

    @cached_property
    def setup(self) -> dict[str, str]:
        """REPO_NAME, BASE_COMMIT and URL (the `git clone` source) from setup.sh."""
        text = (self.path / "setup.sh").read_text()
        out = dict(re.findall(r'^(REPO_NAME|BASE_COMMIT)="?([^"\n]+)"?', text, re.MULTILINE))
        m = re.search(r"git clone\s+(\S+)", text)
        if m:
            # typst's setup.sh clones https://github.com/${REPO_OWNER}/${REPO_NAME}.
            names = dict(re.findall(r'^([A-Z_]+)="?([^"\s]+)"?', text, re.MULTILINE))
            out["URL"] = re.sub(r"\$\{?([A-Z_]+)\}?", lambda v: names.get(v.group(1), v.group(0)),
                                m.group(1).strip("\"'"))
        return out

    @property
    def base_commit(self) -> str:
        return self.setup["BASE_COMMIT"]

    @property
    def upstream(self) -> str:
        """owner/name of the upstream repository (from the clone URL), or REPO_NAME."""
        url = self.setup.get("URL", "")
        m = re.search(r"github\.com[/:]([^/]+)/([^/\s]+?)(?:\.git)?/?$", url)
        return f"{m.group(1)}/{m.group(2)}" if m else self.setup.get("REPO_NAME", self.repo)

    @cached_property
    def language(self) -> Language:
        docker = self.path / "Dockerfile"
        text = docker.read_text().lower() if docker.exists() else ""
        first = next((ln for ln in text.splitlines() if ln.startswith("from ")), "")
        for word, lang in (("golang", "go"), ("node", "typescript"), ("rust", "rust"),
                           ("python", "python")):
            if word in first:
                return lang  # type: ignore[return-value]
        if "cargo " in text or "rustup" in text:
            return "rust"
        return "python" if "pip " in text or "pytest" in text else "unknown"


def test_command(runner: str) -> str:
    """The test-running tail of a task's runner.sh (from its "Running tests" step to the
    end), preceded by the script's simple variable assignments it may use. Dependency
    installation, which the published script repeats on every run, is left out: the
    environment is prepared once per task."""
    lines = runner.splitlines()
    start = next((i for i, ln in enumerate(lines) if re.match(r"\s*#\s*Run(ning)? tests", ln,
                                                               re.IGNORECASE)), None)
    if start is None:
        start = next((i for i, ln in enumerate(lines) if "Running tests" in ln), None)
    if start is None:
        start = next((i for i, ln in enumerate(lines)
                      if re.search(r"\b(pytest|go test|cargo test|jest|vitest)\b", ln)), None)
    if start is None:
        raise ValueError("runner.sh has no test step")
    assigns = [ln for ln in lines[:start]
               if re.match(r"^[A-Z][A-Z0-9_]*=", ln) and not ln.startswith(("TEST_PATCH=",
                                                                            "FEATURE_PATCH="))]
    return "\n".join(["set -e", *assigns, *lines[start:]]) + "\n"


@dataclass(frozen=True, slots=True, order=True)
class Pair:
    """Two features of one task: agent1 gets `f1`, agent2 `f2`."""

    task: str
    f1: int
    f2: int

    @property
    def key(self) -> str:
        return f"{self.task}:{self.f1}-{self.f2}"


def load_tasks(dataset: Path) -> dict[str, Task]:
    """Every task of a CooperBench `dataset/` directory, by key (`repo/taskN`)."""
    if not dataset.is_dir():
        raise FileNotFoundError(f"no dataset directory {dataset}")
    tasks: dict[str, Task] = {}
    for repo_dir in sorted(p for p in dataset.iterdir() if p.is_dir()):
        for task_dir in sorted(repo_dir.glob("task*")):
            m = re.fullmatch(r"task(\d+)", task_dir.name)
            if not m or not (task_dir / "setup.sh").exists():
                continue
            feats = {}
            for fd in task_dir.glob("feature*"):
                fm = re.fullmatch(r"feature(\d+)", fd.name)
                if fm and (fd / "feature.patch").exists() and (fd / "tests.patch").exists():
                    feats[int(fm.group(1))] = Feature(int(fm.group(1)), fd)
            task = Task(repo_dir.name, int(m.group(1)), task_dir, dict(sorted(feats.items())))
            tasks[task.key] = task
    if not tasks:
        raise FileNotFoundError(f"{dataset} holds no CooperBench tasks (<repo>/task<N>/setup.sh)")
    return tasks


def _subset(dataset: Path, subset: str) -> dict[str, list[tuple[int, int]]]:
    path = Path(subset)
    if not path.exists():
        path = dataset / "subsets" / f"{subset}.json"
    if not path.exists():
        raise FileNotFoundError(f"no subset {subset!r} (looked for {path})")
    data = json.loads(path.read_text())
    out: dict[str, list[tuple[int, int]]] = {}
    for t in data["tasks"]:
        key = f"{t['repo']}/task{t['task_id']}"
        pairs = t.get("pairs")
        if pairs is None and "features" in t:
            pairs = list(combinations(sorted(t["features"]), 2))
        out.setdefault(key, []).extend((int(a), int(b)) for a, b in pairs or [])
    return out


def _match_task(spec: str, tasks: dict[str, Task]) -> list[str]:
    spec = spec.strip()
    if spec in tasks:
        return [spec]
    found = [k for k, t in tasks.items()
             if spec in (str(t.id), f"task{t.id}") or k.endswith("/" + spec)
             or spec in k]
    if not found:
        raise ValueError(f"no task matches {spec!r}")
    return found


def select_pairs(
    tasks: dict[str, Task],
    *,
    dataset: Path | None = None,
    subset: str | None = None,
    task: str | None = None,
    features: str | None = None,
    pairs: str | None = None,
) -> list[Pair]:
    """The pairs to run: every 2-combination of each chosen task's features, or a
    subset's pairs; `task` (comma-separated keys, ids or substrings), `features`
    ("1,2,3": pairs among these) and `pairs` ("1-2,3-4", or N for the first N)
    narrow it. Raises ValueError or FileNotFoundError for a bad choice."""
    if subset:
        if dataset is None:
            raise ValueError("--subset needs --dataset")
        chosen = {k: v for k, v in _subset(dataset, subset).items() if k in tasks}
    else:
        chosen = {k: list(combinations(list(t.features), 2)) for k, t in tasks.items()}
    if task:
        keys = {k for s in task.split(",") if s.strip() for k in _match_task(s, tasks)}
        chosen = {k: v for k, v in chosen.items() if k in keys}
    out = [Pair(k, a, b) for k, v in chosen.items() for a, b in v
           if a in tasks[k].features and b in tasks[k].features]
    if features:
        want = {int(x) for x in features.split(",") if x.strip()}
        out = [p for p in out if p.f1 in want and p.f2 in want]
    if pairs:
        if pairs.strip().isdigit():
            out = sorted(out)[: int(pairs)]
        else:
            want_pairs = set()
            for item in pairs.split(","):
                a, _, b = item.strip().replace(":", "-").partition("-")
                want_pairs.add((int(a), int(b)))
            out = [p for p in out if (p.f1, p.f2) in want_pairs]
    return sorted(set(out))


def mini_suite() -> Path:
    """The bundled mini suite's root (holding `dataset/` and `repos/`)."""
    return Path(str(resources.files("bench") / "data" / "cooperbench-mini"))
