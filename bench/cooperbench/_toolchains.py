"""Test environments for CooperBench's Go, TypeScript and Rust tasks: one small
preparer per language, run once per task (network allowed only then), cached under
`cache/envs/<task>`, after which the task's own test command runs offline.

    go          `go` on PATH (Debian's golang-go) or $CORRAL_BENCH_GO; `go mod download`
                into the cache's GOPATH, the build cache warmed by a no-test `go test`.
    typescript  node and npm on PATH; the lockfile's package manager (pnpm at the major
                the runner names, npm, yarn) installs node_modules from the npm
                registry; each test run links them into the lab checkout.
    rust        cargo on PATH or in ~/.cargo/bin; `cargo fetch --locked`, then the
                Dockerfile's own `cargo build` steps into a shared target directory.

A toolchain that is missing, or dependencies that cannot be fetched here (crates.io,
the Go module proxy and GitHub are out of reach on some machines), make the task
`Unsupported` with the reason, never a failure.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ._env import Environment, Unsupported, _locked

if TYPE_CHECKING:
    from ._dataset import Task

__all__ = ["LANGUAGES", "check", "prepare", "test_command"]

LANGUAGES = ("go", "typescript", "rust")

# Installers that download a binary from outside the package registries fail on a
# machine that reaches only the registries; none of these binaries runs unit tests.
_NO_BINARY_DOWNLOADS = {
    "CYPRESS_INSTALL_BINARY": "0", "HUSKY": "0", "PUPPETEER_SKIP_DOWNLOAD": "1",
    "PLAYWRIGHT_SKIP_BROWSER_DOWNLOADS": "1", "ELECTRON_SKIP_BINARY_DOWNLOAD": "1",
}


def _safe(task: Task) -> str:
    return task.key.replace("/", "-")


# -- toolchains ---------------------------------------------------------------------

def _go() -> str | None:
    return os.environ.get("CORRAL_BENCH_GO") or shutil.which("go")


def _cargo() -> str | None:
    home = Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo"))
    found = shutil.which("cargo") or (str(home / "bin" / "cargo")
                                      if (home / "bin" / "cargo").exists() else None)
    return found


def _tools(language: str) -> dict[str, str]:
    """The binaries a language's tests need, by name; raises Unsupported."""
    if language == "go":
        go = _go()
        if not go or not os.access(go, os.X_OK):
            raise Unsupported("Go task: no `go` toolchain on this machine (install Debian's "
                              "golang-go, or set CORRAL_BENCH_GO to a go binary)")
        return {"go": go}
    if language == "typescript":
        found = {n: shutil.which(n) for n in ("node", "npm", "npx")}
        missing = [n for n, p in found.items() if not p]
        if missing:
            raise Unsupported(f"TypeScript task: no {'/'.join(missing)} on this machine "
                              "(install Debian's nodejs and npm)")
        return {n: p for n, p in found.items() if p}
    if language == "rust":
        cargo = _cargo()
        if not cargo:
            raise Unsupported("Rust task: no `cargo` on this machine (install Debian's "
                              "cargo, or rustup)")
        out = {"cargo": cargo}
        rustc = shutil.which("rustc") or str(Path(cargo).with_name("rustc"))
        if Path(rustc).exists():
            out["rustc"] = rustc
        return out
    raise Unsupported(f"{language} task: no environment recipe")


def check(task: Task) -> None:
    """Raises Unsupported when this machine lacks `task`'s toolchain."""
    _tools(task.language)


# -- test commands ------------------------------------------------------------------

def _assignments(lines: list[str], end: int) -> list[str]:
    return [ln for ln in lines[:end] if re.match(r"^[A-Z][A-Z0-9_]*=", ln)
            and not ln.startswith(("TEST_PATCH=", "FEATURE_PATCH="))]


def _go_command(lines: list[str]) -> list[str]:
    # From the runner's analysis of the tests patch (it runs only the Test functions the
    # patch adds) to the end; the patch is $TEST_PATCH instead of /patches/$TEST_PATCH.
    start = next((i for i, ln in enumerate(lines)
                  if "TEST_FUNCS=()" in ln or re.search(r"#.*[Aa]naly[sz]e test patch", ln)),
                 None)
    if start is None:
        start = next((i for i, ln in enumerate(lines) if re.search(r"\bgo test\b", ln)), None)
    if start is None:
        raise ValueError("runner.sh has no `go test` step")
    body = [ln.replace("/patches/$TEST_PATCH", "$TEST_PATCH") for ln in lines[start:]]
    return [*_assignments(lines, start), *body]


_JS_TEST = re.compile(r"^\s*(timeout\s+\d+\s+)?(npx\s+(--yes\s+)?)?"
                      r"((pnpm|yarn)(@\S+)?|npm)\s+(run\s+)?test\b|\b(jest|vitest)\b")


def _ts_command(lines: list[str]) -> list[str]:
    # The runner's test lines (installs are done once, at preparation), after the
    # node_modules prepared for the task are linked into the checkout.
    picked = [i for i, ln in enumerate(lines)
              if _JS_TEST.search(ln) and "install" not in ln and not ln.lstrip().startswith(
                  ("#", "echo"))]
    if not picked:
        raise ValueError("runner.sh has no pnpm/npm/yarn test, jest or vitest step")
    return [*_assignments(lines, picked[0]), '"$CORRAL_BENCH_LINK_DEPS"',
            *(lines[i] for i in picked)]


def _rust_command(lines: list[str]) -> list[str]:
    start = next((i for i, ln in enumerate(lines)
                  if re.match(r"\s*cargo\s+(build|test)\b", ln)), None)
    if start is None:
        raise ValueError("runner.sh has no cargo build/test step")
    return [*_assignments(lines, start), *lines[start:]]


def test_command(task: Task) -> str:
    """The test step of a Go, TypeScript or Rust task's runner.sh, to run in a lab
    checkout with the environment `prepare` made. Raises ValueError."""
    lines = (task.path / "runner.sh").read_text().splitlines()
    pick = {"go": _go_command, "typescript": _ts_command, "rust": _rust_command}
    if task.language not in pick:
        raise ValueError(f"no test command recipe for a {task.language} task")
    return "\n".join(["set -e", *pick[task.language](lines)]) + "\n"


# -- preparation --------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Prep:
    """One preparation: its directory, the copy of the base tree it installs into,
    and a log of every command."""

    task: Task
    root: Path
    src: Path
    log: Path

    def run(self, argv: list[str], env: Mapping[str, str], *, check: bool = True,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        with self.log.open("a") as f:
            f.write(f"$ {shlex.join(argv)}\n")
            f.flush()
            r = subprocess.run(argv, cwd=cwd or self.src, env={**os.environ, **env},
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               errors="replace")
            f.write(r.stdout)
        if check and r.returncode != 0:
            raise RuntimeError(f"preparing {self.task.key}: {shlex.join(argv)} failed "
                               f"(exit {r.returncode}; see {self.log})")
        return r

    def expose(self, tool: Path) -> None:
        """Put `tool` on the tests' PATH (the environment's bin directory)."""
        link = self.root / "bin" / tool.name
        if not link.exists():
            link.symlink_to(tool.resolve())


def _tail(text: str, n: int = 3) -> str:
    """The last lines of a failed command's output, where its error is."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return " | ".join(lines[-n:])


def _prepare_go(p: _Prep, tools: dict[str, str]) -> dict[str, str]:
    gopath = p.root / "gopath"
    env = {"GOPATH": str(gopath), "GOMODCACHE": str(gopath / "pkg" / "mod"),
           "GOCACHE": str(p.root / "gocache"), "GOTOOLCHAIN": "local",
           "GOTELEMETRY": "off", "GOFLAGS": "-modcacherw"}
    # Go modules come from the module proxy (or their VCS): reachable or not, this is
    # the only step that may use the network.
    r = p.run([tools["go"], "mod", "download"], env, check=False)
    if r.returncode != 0:
        raise Unsupported(f"Go task: its modules could not be downloaded here "
                          f"(go mod download: {_tail(r.stdout)})")
    # -count=1: each run really runs, as in a fresh task container (the shared GOCACHE
    # would otherwise replay an earlier run's result for the same code).
    offline = {**env, "GOPROXY": "off", "GOSUMDB": "off", "GOFLAGS": "-modcacherw -count=1"}
    # Compile the standard library and dependencies once; a base whose tests do not
    # build is still prepared (the features' patches may be what makes it build).
    p.run([tools["go"], "test", "-count=1", "-run", "^$", "./..."], offline, check=False)
    return offline


def _lockfile_major(src: Path) -> int | None:
    lock = src / "pnpm-lock.yaml"
    if not lock.exists():
        return None
    m = re.search(r"^lockfileVersion:\s*'?(\d+)(?:\.(\d+))?", lock.read_text(), re.MULTILINE)
    if not m:
        return None
    # pnpm 7 writes 5.4, pnpm 8 writes 6.0, pnpm 9 and 10 write 9.0.
    return {5: 7, 6: 8, 9: 9}.get(int(m.group(1)))


def _prepare_typescript(p: _Prep, tools: dict[str, str]) -> dict[str, str]:
    runner = (p.task.path / "runner.sh").read_text()
    tools_dir = p.root / "tools"
    env = {"npm_config_cache": str(p.root / "npm-cache"), "npm_config_update_notifier": "false",
           "npm_config_fund": "false", "npm_config_audit": "false", **_NO_BINARY_DOWNLOADS}
    # The package manager's own version: the runner's `pnpm@N`, else the lockfile's.
    if (p.src / "pnpm-lock.yaml").exists():
        m = re.search(r"pnpm@(\d+)", runner)
        major = m.group(1) if m else str(_lockfile_major(p.src) or "")
        manager = f"pnpm@{major}" if major else "pnpm"
        install = ["pnpm", "install", "--frozen-lockfile", "--store-dir",
                   str(p.root / "pnpm-store")]
    elif (p.src / "yarn.lock").exists():
        manager, install = "yarn@1", ["yarn", "install", "--frozen-lockfile"]
    else:
        manager = ""
        install = ["npm", "ci" if (p.src / "package-lock.json").exists() else "install"]
    r = None
    if manager:
        r = p.run([tools["npm"], "install", "--prefix", str(tools_dir), "--no-save", manager],
                  env, check=False, cwd=p.root)
    if r is not None and r.returncode != 0:
        raise Unsupported(f"TypeScript task: {manager} could not be installed from the npm "
                          f"registry ({_tail(r.stdout)})")
    bin_dir = tools_dir / "node_modules" / ".bin"
    argv = [str(bin_dir / install[0]) if manager else tools["npm"], *install[1:]]
    r = p.run(argv, {**env, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"}, check=False)
    if r.returncode != 0:
        raise Unsupported(f"TypeScript task: its packages could not be installed "
                          f"({shlex.join(install)}: {_tail(r.stdout)})")
    # `npx pkg@N` in the test step must find pkg in the cache once offline.
    for spec in sorted(set(re.findall(r"\bnpx\s+(?:--yes\s+)?(\S+@\S+)", runner))):
        p.run([tools["npx"], "--yes", spec, "--version"], env, check=False)
    _write_linker(p)
    for tool in bin_dir.glob("*"):
        p.expose(tool)
    return {**env, "npm_config_offline": "true", "npm_config_yes": "true",
            "CORRAL_BENCH_LINK_DEPS": str(p.root / "link-deps")}


def _write_linker(p: _Prep) -> None:
    """A script that links every installed node_modules directory (the root's and
    each workspace package's) into the checkout it runs in. Linked, not copied: a
    checkout is reset with `git clean -fdx` before every run, which removes the link."""
    found = sorted(d.relative_to(p.src) for d in p.src.rglob("node_modules")
                   if d.is_dir() and "node_modules" not in d.relative_to(p.src).parts[:-1])
    lines = ["#!/bin/sh", "# Written by Corral's CooperBench harness: link the task's",
             "# prepared node_modules into the current checkout.", "set -e"]
    for rel in found:
        target = shlex.quote(str(p.src / rel))
        link = shlex.quote(str(rel))
        lines.append(f"[ -d {shlex.quote(str(rel.parent))} ] && ln -sfn {target} {link} "
                     "|| true")
    script = p.root / "link-deps"
    script.write_text("\n".join(lines) + "\n")
    script.chmod(0o755)


def _prepare_rust(p: _Prep, tools: dict[str, str]) -> dict[str, str]:
    env = {"CARGO_TARGET_DIR": str(p.root / "target"), "CARGO_TERM_COLOR": "never"}
    locked = ["--locked"] if (p.src / "Cargo.lock").exists() else []
    r = p.run([tools["cargo"], "fetch", *locked], env, check=False)
    if r.returncode != 0:
        lock = (p.src / "Cargo.lock").read_text() if locked else ""
        crates = len(re.findall(r'^source = "registry\+', lock, re.MULTILINE))
        gits = re.findall(r'^source = "git\+([^?#"]+)', lock, re.MULTILINE)
        pinned = (f"; Cargo.lock pins {crates} crates from a registry"
                  + (f" and {len(gits)} git dependencies ({', '.join(sorted(set(gits)))})"
                     if gits else "")) if locked else ""
        caused = [ln.strip() for ln in r.stdout.splitlines() if ln.strip()]
        raise Unsupported(f"Rust task: its crates could not be fetched here{pinned} "
                          f"(cargo fetch: {caused[-1] if caused else 'failed'})")
    offline = {**env, "CARGO_NET_OFFLINE": "true"}
    # The Dockerfile's own pre-build (its cache layer), else the tests' build.
    docker = p.task.path / "Dockerfile"
    text = docker.read_text() if docker.exists() else ""
    builds = [c.strip() for ln in re.findall(r"^RUN\s+(.*(?:\\\n.*)*)", text, re.MULTILINE)
              for c in ln.replace("\\\n", " ").split("&&") if c.strip().startswith("cargo ")]
    for cmd in builds or ["cargo test --no-run"]:
        argv = shlex.split(cmd)
        p.run([tools["cargo"], *argv[1:]], offline)
    return offline


_PREPARERS: dict[str, Callable[[_Prep, dict[str, str]], dict[str, str]]] = {
    "go": _prepare_go, "typescript": _prepare_typescript, "rust": _prepare_rust,
}


def _environment(root: Path, extra: dict[str, str], **kw: object) -> Environment:
    return Environment(root / "bin", extra=tuple(sorted(extra.items())), **kw)  # type: ignore[arg-type]


def prepare(task: Task, repo: Path, cache: Path) -> Environment:
    """`task`'s test environment, prepared once and cached under `cache/envs`.

    Raises Unsupported when the toolchain is missing or the dependencies cannot be
    fetched here, RuntimeError when another preparation step fails."""
    tools = _tools(task.language)
    root = cache / "envs" / _safe(task)
    ready = root / "ready.json"
    with _locked(cache / "locks" / (_safe(task) + ".env")):
        if ready.exists():
            data = json.loads(ready.read_text())
            return _environment(root, data["extra"], cached=True)
        started = time.monotonic()
        if root.exists():
            shutil.rmtree(root)
        root.mkdir(parents=True)
        src = root / "src"
        shutil.copytree(repo, src, symlinks=True, ignore=shutil.ignore_patterns(".git"))
        # The toolchain's binaries first on the tests' PATH, whatever PATH they run with.
        (root / "bin").mkdir()
        for name, path in tools.items():
            (root / "bin" / name).symlink_to(path)
        prep = _Prep(task, root, src, root / "prepare.log")
        try:
            extra = _PREPARERS[task.language](prep, tools)
        except Unsupported:
            shutil.rmtree(root, ignore_errors=True)
            raise
        seconds = time.monotonic() - started
        ready.write_text(json.dumps({"task": task.key, "language": task.language,
                                     "prepared_s": round(seconds, 2), "tools": tools,
                                     "extra": extra}, indent=1))
        return _environment(root, extra, prepared_s=seconds)
