"""Go, TypeScript and Rust tasks: each language's environment is prepared once from
its registry and its tests run offline with the task's own command; a missing
toolchain or unfetchable dependencies make the task `unsupported`, never a failure.

The tasks are tiny projects written here in CooperBench's on-disk format (a base
repository, two features with gold and test patches made by real git); the end-to-end
cases skip, saying why, where the toolchain or the npm registry is missing."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from bench.cooperbench import RunSpec, load_tasks, run
from bench.cooperbench._lab import git
from bench.cooperbench._toolchains import _cargo, _go
from bench.cooperbench._toolchains import test_command as toolchain_command

pytestmark = pytest.mark.slow

Files = dict[str, str]


def _commit(repo: Path, files: Files, message: str) -> str:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD").stdout.strip()


def make_task(root: Path, name: str, docker: str, runner: str, base: Files,
              features: list[tuple[Files, Files]]) -> Path:
    """A one-task CooperBench dataset under `root/dataset` and the task's repository
    under `root/repos/<name>`; each feature is (source files, test files), its
    feature.patch and tests.patch the diffs git makes of them. Returns the dataset."""
    repo = root / "repos" / name
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    base_commit = _commit(repo, base, "base")
    task = root / "dataset" / f"{name}_task" / "task1"
    task.mkdir(parents=True)
    (task / "setup.sh").write_text(f'REPO_NAME="{name}"\nBASE_COMMIT="{base_commit}"\n')
    (task / "Dockerfile").write_text(docker)
    (task / "runner.sh").write_text(runner)
    for k, (src, tests) in enumerate(features, 1):
        d = task / f"feature{k}"
        d.mkdir()
        (d / "feature.md").write_text(f"Feature {k}\n")
        for kind, files in (("feature", src), ("tests", tests)):
            git(repo, "checkout", "-q", "--detach", base_commit)
            _commit(repo, files, kind)
            (d / f"{kind}.patch").write_text(git(repo, "diff", base_commit, "HEAD").stdout)
    git(repo, "checkout", "-q", "main")
    return root / "dataset"


def _run(tmp_path: Path, dataset: Path) -> list:  # type: ignore[type-arg]
    spec = RunSpec(out=tmp_path / "out", dataset=dataset, repos=tmp_path / "repos",
                   settings=("coop",), merges=("plain",), workers=1, test_timeout=300)
    return run(spec)["results"]


# -- test commands -------------------------------------------------------------------

GO_RUNNER = """#!/bin/bash
set -e
TEST_PATCH="$1"
cd /workspace/repo
git apply "/patches/$TEST_PATCH"
# Analyze test patch for test functions
TEST_FUNCS=()
NEW_FUNCS=$(grep -o "func Test[a-zA-Z0-9_]*" "/patches/$TEST_PATCH" | sed 's/func //' || true)
for func in $NEW_FUNCS; do
    TEST_FUNCS+=("$func")
done
TEST_PATTERN=$(IFS="|"; echo "${TEST_FUNCS[*]}")
echo "Running Go tests..."
go test -v -run "$TEST_PATTERN" ./...
"""

TS_RUNNER = """#!/bin/bash
set -e
cd /workspace/repo
if [ -d "/workspace/node_modules_cache" ]; then
    cp -r /workspace/node_modules_cache node_modules
fi
git apply "/patches/$TEST_PATCH"
npx pnpm@9 install >/dev/null 2>&1
# Run test
npx pnpm@9 test 2>&1
"""

RUST_RUNNER = """#!/bin/bash
set -e
cd /workspace/repo
git apply "/patches/$TEST_PATCH"
echo "Running tests..."
cargo test 2>&1
"""


def test_each_language_runs_its_runners_own_test_step(tmp_path: Path) -> None:
    """Go greps the tests patch at $TEST_PATCH for Test functions; TypeScript links
    the prepared node_modules and drops the runner's installs; Rust keeps cargo's
    steps. Nothing before the test step (patch application, cd) is kept."""
    for lang, runner, docker in (("go", GO_RUNNER, "FROM golang:1.21-alpine\n"),
                                 ("ts", TS_RUNNER, "FROM node:22-slim\n"),
                                 ("rs", RUST_RUNNER, "FROM rust:1.80-slim\n")):
        make_task(tmp_path / lang, lang, docker, runner, {"README": "x\n"}, [])
    cmds = {t.language: toolchain_command(t) for p in ("go", "ts", "rs")
            for t in load_tasks(tmp_path / p / "dataset").values()}
    go, ts, rs = cmds["go"], cmds["typescript"], cmds["rust"]
    assert '"$TEST_PATCH"' in go and "/patches/" not in go and "cd /workspace" not in go
    assert go.startswith("set -e\n# Analyze") and 'go test -v -run "$TEST_PATTERN"' in go
    assert ts == 'set -e\n"$CORRAL_BENCH_LINK_DEPS"\nnpx pnpm@9 test 2>&1\n'
    assert rs == 'set -e\ncargo test 2>&1\n'


def test_a_missing_go_is_unsupported_with_how_to_get_it(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """CORRAL_BENCH_GO naming no binary: the Go task is unsupported, the reason names
    Debian's golang-go, and it counts in no pass rate."""
    monkeypatch.setenv("CORRAL_BENCH_GO", str(tmp_path / "no-go"))
    dataset = make_task(tmp_path, "gomod", "FROM golang:1.21-alpine\n", GO_RUNNER,
                        {"go.mod": "module example.com/gomod\n\ngo 1.18\n"},
                        [({"a.go": "package gomod\n"}, {}), ({"b.go": "package gomod\n"}, {})])
    (r,) = _run(tmp_path, dataset)
    assert r.status == "unsupported" and "golang-go" in r.reason and not r.counted


# -- Go ------------------------------------------------------------------------------

needs_go = pytest.mark.skipif(
    not _go() or not os.access(_go() or "", os.X_OK),
    reason="no go toolchain (install Debian's golang-go or set CORRAL_BENCH_GO)")

GO_BASE = {"go.mod": "module example.com/calc\n\ngo 1.18\n",
           "calc.go": "package calc\n\nfunc Add(a, b int) int { return a + b }\n"}
# Feature 1's test serves on 127.0.0.1 inside the offline namespace: loopback is up.
GO_FEATURES = [
    ({"mul.go": "package calc\n\nfunc Mul(a, b int) int { return a * b }\n"},
     {"mul_test.go": """package calc

import (
\t"io"
\t"net/http"
\t"net/http/httptest"
\t"strconv"
\t"testing"
)

func TestMul(t *testing.T) {
\tsrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
\t\tw.Write([]byte(strconv.Itoa(Mul(6, 7))))
\t}))
\tdefer srv.Close()
\tresp, err := http.Get(srv.URL)
\tif err != nil {
\t\tt.Fatal(err)
\t}
\tbody, _ := io.ReadAll(resp.Body)
\tif string(body) != "42" {
\t\tt.Fatalf("got %s", body)
\t}
}
"""}),
    ({"sub.go": "package calc\n\nfunc Sub(a, b int) int { return a - b }\n"},
     {"sub_test.go": "package calc\n\nimport \"testing\"\n\nfunc TestSub(t *testing.T) {\n"
                     "\tif Sub(5, 3) != 2 {\n\t\tt.Fatal(Sub(5, 3))\n\t}\n}\n"}),
]


@needs_go
def test_a_go_pair_is_prepared_once_and_tested_offline(tmp_path: Path) -> None:
    """Two disjoint Go features merge cleanly and both pass: `go test -v` counts each
    feature's Test function, run offline on the merged tree."""
    dataset = make_task(tmp_path, "calc", "FROM golang:1.21-alpine\nRUN go mod download\n",
                        GO_RUNNER, GO_BASE, GO_FEATURES)
    (r,) = _run(tmp_path, dataset)
    assert (r.status, r.merge_status) == ("passed", "clean"), r.reason
    assert [f.tests_passed for f in r.features] == [1, 1]
    env = tmp_path / "out" / "cache" / "envs" / "calc_task-task1"
    assert (env / "ready.json").exists() and (env / "bin" / "go").is_symlink()
    log = (tmp_path / "out" / "logs" / "calc_task-task1" / "1-2" / "coop-plain-f1.log")
    assert "--- PASS: TestMul" in log.read_text()


@needs_go
def test_go_modules_that_cannot_be_downloaded_make_the_task_unsupported(tmp_path: Path
                                                                         ) -> None:
    """A module requiring a module no proxy has (an .invalid host) is unsupported,
    with go's own complaint in the reason, and nothing is cached for it."""
    base = {**GO_BASE, "go.mod": "module example.com/calc\n\ngo 1.18\n\n"
                                 "require corral.invalid/dep v1.0.0\n"}
    dataset = make_task(tmp_path, "calc", "FROM golang:1.21-alpine\n", GO_RUNNER, base,
                        GO_FEATURES)
    (r,) = _run(tmp_path, dataset)
    assert r.status == "unsupported" and "modules could not be downloaded" in r.reason
    assert "corral.invalid" in r.reason
    assert not (tmp_path / "out" / "cache" / "envs" / "calc_task-task1").exists()


# -- Rust ----------------------------------------------------------------------------

needs_cargo = pytest.mark.skipif(not _cargo(), reason="no cargo (install Debian's cargo)")

# No unit or doc tests in the library: cargo's first "N passed" line (the count
# CooperBench reads) is then the integration test's.
RUST_BASE = {"Cargo.toml": '[package]\nname = "calc"\nversion = "0.1.0"\nedition = "2021"\n'
                           "\n[lib]\ntest = false\ndoctest = false\n\n[dependencies]\n",
             ".gitignore": "/target\n",
             "src/lib.rs": "pub fn add(a: i64, b: i64) -> i64 { a + b }\n"}
RUST_FEATURES = [
    ({"src/lib.rs": RUST_BASE["src/lib.rs"] + "pub mod mul;\n",
      "src/mul.rs": "pub fn mul(a: i64, b: i64) -> i64 { a * b }\n"},
     {"tests/mul.rs": "#[test]\nfn mul() { assert_eq!(calc::mul::mul(6, 7), 42); }\n"}),
    ({"src/sub.rs": "pub fn sub(a: i64, b: i64) -> i64 { a - b }\n"},
     {"tests/sub.rs": "#[test]\nfn add() { assert_eq!(calc::add(2, 2), 4); }\n"}),
]


@needs_cargo
def test_a_rust_crate_without_dependencies_is_built_once_and_tested(tmp_path: Path) -> None:
    """Preparation runs the Dockerfile's `cargo build`; each test run reuses the
    shared target directory offline; cargo's `N passed` is the count."""
    dataset = make_task(tmp_path, "calc", "FROM rust:1.80-slim\nRUN cargo build\n",
                        RUST_RUNNER, RUST_BASE, RUST_FEATURES)
    (r,) = _run(tmp_path, dataset)
    assert (r.status, r.merge_status) == ("passed", "clean"), r.reason
    assert [f.tests_passed for f in r.features] == [1, 1]
    env = tmp_path / "out" / "cache" / "envs" / "calc_task-task1"
    assert (env / "target" / "debug").is_dir()


@needs_cargo
def test_crates_that_cannot_be_fetched_make_the_task_unsupported(tmp_path: Path) -> None:
    """A git dependency at an .invalid host cannot be fetched: unsupported, with
    cargo's reason."""
    base = {**RUST_BASE, "Cargo.toml": RUST_BASE["Cargo.toml"]
            + 'dep = { git = "https://corral.invalid/dep.git" }\n'}
    dataset = make_task(tmp_path, "calc", "FROM rust:1.80-slim\n", RUST_RUNNER, base,
                        RUST_FEATURES)
    (r,) = _run(tmp_path, dataset)
    assert r.status == "unsupported" and "crates could not be fetched" in r.reason, r.reason
    assert not r.counted


# -- TypeScript ----------------------------------------------------------------------

TS_BASE = {
    "package.json": '{"name": "calc", "private": true, "scripts": {"test": "vitest run"},\n'
                    ' "devDependencies": {"vitest": "1.6.0"}}\n',
    ".gitignore": "node_modules\n",
    "src/add.ts": "export const add = (a: number, b: number): number => a + b;\n",
}
TS_FEATURES = [
    ({"src/mul.ts": "export const mul = (a: number, b: number): number => a * b;\n"},
     {"src/mul.test.ts": "import { expect, test } from 'vitest';\nimport { mul } from './mul';"
                         "\ntest('mul', () => expect(mul(6, 7)).toBe(42));\n"}),
    ({"src/sub.ts": "export const sub = (a: number, b: number): number => a - b;\n"},
     {"src/sub.test.ts": "import { expect, test } from 'vitest';\nimport { sub } from './sub';"
                         "\ntest('sub', () => expect(sub(5, 3)).toBe(2));\n"}),
]


@pytest.fixture(scope="module")
def ts_base(tmp_path_factory: pytest.TempPathFactory) -> Files:
    """The TypeScript base with the pnpm-lock.yaml pnpm 9 resolves (from the npm
    registry: skipped when it cannot be reached)."""
    if not (shutil.which("node") and shutil.which("npx")):
        pytest.skip("no node/npx (install Debian's nodejs and npm)")
    d = tmp_path_factory.mktemp("lock")
    (d / "package.json").write_text(TS_BASE["package.json"])
    r = subprocess.run(["npx", "--yes", "pnpm@9", "install", "--lockfile-only"], cwd=d,
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        pytest.skip(f"the npm registry cannot be reached: {r.stderr.strip()[-300:]}")
    return {**TS_BASE, "pnpm-lock.yaml": (d / "pnpm-lock.yaml").read_text()}


def test_a_typescript_pair_installs_once_and_links_node_modules(tmp_path: Path,
                                                                ts_base: Files) -> None:
    """pnpm (the runner's major) installs vitest once; every test run links the
    prepared node_modules into the lab and runs `npx pnpm@9 test` offline."""
    dataset = make_task(tmp_path, "calc", "FROM node:22-slim\nRUN npx pnpm@9 install\n",
                        TS_RUNNER, ts_base, TS_FEATURES)
    (r,) = _run(tmp_path, dataset)
    assert (r.status, r.merge_status) == ("passed", "clean"), r.reason
    assert all(f.tests_passed >= 1 for f in r.features)
    env = tmp_path / "out" / "cache" / "envs" / "calc_task-task1"
    assert (env / "src" / "node_modules" / "vitest").exists()
    assert (env / "bin" / "pnpm").exists()
    lab = next((tmp_path / "out" / "labs" / "calc_task-task1").iterdir())
    # The lab's last run linked node_modules; its git status shows no tracked change.
    assert (lab / "node_modules").is_symlink()
    assert git(lab, "status", "--porcelain", "--untracked-files=no").stdout == ""
