"""Fixtures for the sandbox conformance suite: a live backend per name, a small base tree."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import sandboxes
from sandboxes import Backend, Workspace

BASE_FILES = {
    "README.md": b"# sample\n",
    "src/app.py": b"print('app')\n",
    "src/util.py": b"def helper():\n    return 1\n",
    "docs/guide.md": b"guide\n",
    "docs/deep/more.md": b"more\n",
    "bin/run.sh": b"#!/bin/sh\necho run\n",
}


def populate_base(root: Path) -> None:
    """Write BASE_FILES, an executable and a symlink into `root`."""
    for rel, data in BASE_FILES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    os.chmod(root / "bin/run.sh", 0o755)
    os.symlink("src/app.py", root / "app-link")


def expected_base() -> dict[str, tuple[int, bytes]]:
    files = {rel: (sandboxes.MODE_FILE, data) for rel, data in BASE_FILES.items()}
    files["bin/run.sh"] = (sandboxes.MODE_EXEC, BASE_FILES["bin/run.sh"])
    files["app-link"] = (sandboxes.MODE_LINK, b"src/app.py")
    return dict(sorted(files.items()))


@pytest.fixture
def state_root(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture(params=[pytest.param("overlay", marks=[pytest.mark.root, pytest.mark.slow]),
                        pytest.param("overlay-tmpfs", marks=[pytest.mark.root, pytest.mark.slow]),
                        "copy",
                        pytest.param("fuse", marks=[pytest.mark.root, pytest.mark.slow])])
def live_backend(state_root: Path, request: pytest.FixtureRequest) -> Iterator[Backend]:
    """A backend of each kind, overlay also with its layers on tmpfs; skips
    (with the reason) a backend that cannot run here."""
    name, _, option = str(request.param).partition("-")
    reason = sandboxes.backends[name].unavailable_reason()
    if reason is not None:
        pytest.skip(f"backend {name} unavailable: {reason}")
    instance: Backend = (
        sandboxes.OverlayBackend(state_root, tmpfs=True)
        if option == "tmpfs"
        else sandboxes.backends[name](state_root)
    )
    try:
        yield instance
    finally:
        instance.close()


@pytest.fixture
def root_ws(live_backend: Backend) -> Workspace:
    """A workspace over the sample base tree."""
    return live_backend.base("sample-v1", populate_base)


def mounts_under(root: Path) -> list[str]:
    """Mount points below `root` according to /proc/self/mountinfo."""
    prefix = str(root.resolve())
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        points = [line.split()[4] for line in f]
    return [p for p in points if p == prefix or p.startswith(prefix + "/")]


overlay_only = pytest.mark.skipif(
    sandboxes.OverlayBackend.unavailable_reason() is not None,
    reason=f"overlay backend unavailable: {sandboxes.OverlayBackend.unavailable_reason()}",
)
