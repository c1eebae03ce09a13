"""Synthetic checkouts for the substrate benchmark.

A checkout is a bare git repository with one commit: many small source-like
files in nested directories plus a few large binary files that make up the rest
of the size. Generation is seeded, so the same spec always gives the same
commit, and it is cached: `<cache>/<name>-<key>/repo.git`, with a `complete`
marker written last (a directory without it is a half-made cache and is
regenerated).

The objects are stored uncompressed (zlib level 0) and packed, so Corral's
snapshot import (`git fetch` from the local path) reuses them as they are.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    SpinnerColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TransferSpeedColumn,
)
from rich.text import Text

__all__ = [
    "NAMED_SIZES",
    "CheckoutSpec",
    "checkout",
    "default_cache",
    "parse_size",
    "source_paths",
]

KB, MB, GB = 1 << 10, 1 << 20, 1 << 30
FORMAT = 1
"""Bump when the generator changes: cached checkouts of another format are rebuilt."""

_SOURCE_AVG = 2560
"""Average size of a source file in bytes (real repositories: 1-4 KB)."""
_PER_DIR = 16
_EXTS = (".py", ".py", ".py", ".ts", ".c", ".h", ".md", ".json", ".toml", ".rs")
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "corral-bench", "GIT_AUTHOR_EMAIL": "bench@corral",
    "GIT_COMMITTER_NAME": "corral-bench", "GIT_COMMITTER_EMAIL": "bench@corral",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
}
_NOCOMPRESS = (
    "-c", "core.compression=0", "-c", "core.looseCompression=0", "-c", "pack.compression=0",
    # Big files go straight into a pack while adding: no loose copy, no delta search.
    "-c", "core.bigFileThreshold=1m",
)


class _BytesColumn(DownloadColumn):
    """Bytes done, shown only for tasks that count bytes (not for the git steps)."""

    def render(self, task: Task) -> Text:
        return super().render(task) if task.fields.get("bytes") else Text("")


class _SpeedColumn(TransferSpeedColumn):
    def render(self, task: Task) -> Text:
        return super().render(task) if task.fields.get("bytes") else Text("")


@dataclass(frozen=True, slots=True)
class CheckoutSpec:
    """What a synthetic checkout holds."""

    name: str
    total_bytes: int
    source_files: int
    binary_files: int
    seed: int = 0

    @property
    def key(self) -> str:
        """A short hash of the spec and the generator format: the cache key."""
        raw = json.dumps([FORMAT, asdict(self)], sort_keys=True).encode()
        return hashlib.sha256(raw).hexdigest()[:12]


NAMED_SIZES: dict[str, CheckoutSpec] = {
    "10MB": CheckoutSpec("10MB", 10 * MB, 2_000, 2),
    "500MB": CheckoutSpec("500MB", 500 * MB, 10_000, 4),
    "3GB": CheckoutSpec("3GB", 3 * GB, 30_000, 6),
}

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMG])B?\s*$", re.IGNORECASE)


def parse_size(text: str) -> CheckoutSpec:
    """The spec for a size name: "10MB", "500MB", "3GB", or any "<n>KB|MB|GB".

    Other sizes scale the file count like the named ones (about half the bytes
    in source files for small checkouts). Raises ValueError for a bad size.
    """
    named = NAMED_SIZES.get(text.strip().upper())
    if named is not None:
        return named
    m = _SIZE.match(text)
    if m is None:
        raise ValueError(f"bad checkout size {text!r}: use e.g. 10MB, 500MB, 3GB, 2MB")
    total = int(float(m.group(1)) * {"K": KB, "M": MB, "G": GB}[m.group(2).upper()])
    if total < 64 * KB:
        raise ValueError(f"checkout size {text!r} is too small (at least 64KB)")
    mb = total / MB
    files = int(2_000 * (mb / 10) ** 0.4)
    files = max(8, min(30_000, files, total // 2 // _SOURCE_AVG))
    return CheckoutSpec(f"{mb:g}MB", total, files, 2 if total < 100 * MB else 4)


def default_cache() -> Path:
    """`$CORRAL_BENCH_CACHE`, else `~/.cache/corral/bench`."""
    env = os.environ.get("CORRAL_BENCH_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "corral" / "bench"


def source_paths(spec: CheckoutSpec) -> list[str]:
    """The source files' paths (sorted as generated): nested directories of
    `_PER_DIR` files, two to four levels deep."""
    rng = random.Random(f"paths-{spec.seed}")
    paths = []
    for i in range(spec.source_files):
        d = i // _PER_DIR
        parts = ["src", f"pkg{d % 8}"]
        if d >= 8:
            parts.append(f"mod{(d // 8) % 16}")
        if d >= 128:
            parts.append(f"sub{d // 128}")
        paths.append("/".join([*parts, f"f{i:05d}{rng.choice(_EXTS)}"]))
    return paths


def binary_paths(spec: CheckoutSpec) -> list[str]:
    return [f"assets/blob{i}.bin" for i in range(spec.binary_files)]


def checkout(spec: CheckoutSpec, cache: Path | None = None, *, progress: bool = True) -> Path:
    """The bare repository for `spec` (HEAD = its one commit), generating it
    into the cache first when it is missing or half made. Returns its path."""
    cache = (cache or default_cache()).expanduser().absolute()
    home = cache / f"{spec.name}-{spec.key}"
    repo = home / "repo.git"
    if (home / "complete").exists() and repo.is_dir():
        return repo
    cache.mkdir(parents=True, exist_ok=True)
    if home.exists():
        shutil.rmtree(home)
    work = Path(tempfile.mkdtemp(prefix=f".{spec.name}-", dir=cache))
    try:
        _generate(spec, work, progress)
        os.rename(work, home)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    (home / "complete").write_text(json.dumps(asdict(spec)) + "\n")
    return repo


def _generate(spec: CheckoutSpec, work: Path, show: bool) -> None:
    tree = work / "tree"
    git_dir = work / "repo.git"
    tree.mkdir()
    console = Console(stderr=True)
    columns = (
        SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(),
        _BytesColumn(), _SpeedColumn(), TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, disable=not show, transient=False) as bar:
        written = bar.add_task(
            f"{spec.name}: writing files", total=spec.total_bytes, bytes=True
        )
        small = _write_sources(spec, tree, lambda n: bar.advance(written, n))
        _write_binaries(spec, tree, spec.total_bytes - small, lambda n: bar.advance(written, n))
        bar.update(written, completed=spec.total_bytes)

        def git(step: str, *args: str) -> None:
            task = bar.add_task(f"{spec.name}: git {step}", total=None)
            base = ["git", *_NOCOMPRESS]
            if step != "init":
                base += ["--git-dir", str(git_dir), "--work-tree", str(tree)]
            proc = subprocess.run(
                [*base, *args], capture_output=True, text=True, env={**os.environ, **_GIT_ENV}
            )
            if proc.returncode != 0:
                raise RuntimeError(f"git {' '.join(args)} failed: {proc.stderr.strip()}")
            bar.update(task, total=1, completed=1)

        git("init", "init", "-q", "--bare", "-b", "main", str(git_dir))
        git("add", "add", "-A")
        git("commit", "commit", "-q", "-m", f"synthetic checkout {spec.name} (seed {spec.seed})")
        git("repack", "repack", "-a", "-d", "-q")
    shutil.rmtree(tree)
    subprocess.run(["git", "--git-dir", str(git_dir), "config", "gc.auto", "0"], check=True)


def _write_sources(spec: CheckoutSpec, tree: Path, advance: Callable[[int], object]) -> int:
    """Write the source files; returns their total size."""
    rng = random.Random(f"sources-{spec.seed}")
    words = ["alpha", "beta", "gamma", "delta", "node", "scope", "tree", "patch", "merge",
             "value", "index", "item", "cache", "state", "event", "trace", "layer", "path"]
    lines = []
    for i in range(1024):
        a, b, c = rng.choice(words), rng.choice(words), rng.choice(words)
        lines.append(rng.choice([
            f"def {a}_{b}_{i}({c}, other=None):\n",
            f"    {a} = {b}.{c}({i}, {rng.randrange(1000)})\n",
            f"    if {a} is not None and {b} > {i}:\n",
            f"        return {c}_{a}[{rng.randrange(64)}] + {i}\n",
            f"# {a} {b} {c}: note {i}\n",
            f"class {a.title()}{b.title()}{i}({c.title()}):\n",
            "\n",
        ]))
    total = 0
    made: set[Path] = set()
    for path in source_paths(spec):
        target = tree / path
        if target.parent not in made:
            target.parent.mkdir(parents=True, exist_ok=True)
            made.add(target.parent)
        # log-uniform sizes between 1/8 and 8 times the mean line budget
        n = max(1, int(_SOURCE_AVG / 40 * 2 ** rng.uniform(-2.5, 2.2)))
        data = "".join(rng.choices(lines, k=n)).encode()
        target.write_bytes(data)
        total += len(data)
        advance(len(data))
    return total


def _write_binaries(
    spec: CheckoutSpec, tree: Path, budget: int, advance: Callable[[int], object]
) -> None:
    """Fill `budget` bytes with `binary_files` incompressible files, written in
    1 MB chunks sliced from one seeded random pool (fast; each chunk unique)."""
    if spec.binary_files == 0 or budget <= 0:
        return
    rng = random.Random(f"binaries-{spec.seed}")
    pool = rng.randbytes(8 * MB)
    chunk = MB
    each = budget // spec.binary_files
    for i, path in enumerate(binary_paths(spec)):
        size = each if i < spec.binary_files - 1 else budget - each * (spec.binary_files - 1)
        target = tree / path
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as f:
            left = size
            n = 0
            while left > 0:
                piece = min(chunk, left)
                off = rng.randrange(len(pool) - chunk)
                # a unique header per chunk keeps blobs distinct across files
                header = hashlib.sha256(f"{spec.seed}/{i}/{n}".encode()).digest()
                data = (header + pool[off : off + piece])[:piece]
                f.write(data)
                left -= piece
                n += 1
                advance(piece)
