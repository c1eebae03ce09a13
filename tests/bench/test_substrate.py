"""The substrate benchmark runs end to end on a tiny checkout (behaviour only, no timings)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import sandboxes
from bench import parse_size, run
from bench._synth import checkout, source_paths
from bench.substrate import OPS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]  # slow: a benchmark run


def _working_backend() -> str | None:
    for name, cls in sandboxes.backends.items():
        if cls.unavailable_reason() is None:
            return name
    return None


def test_checkout_is_deterministic_cached_and_rebuilt_when_half_made(tmp_path: Path) -> None:
    """The same spec gives the same commit; a cache without its marker is regenerated."""
    import pygit2

    spec = parse_size("256KB")
    first = checkout(spec, tmp_path / "a", progress=False)
    again = checkout(spec, tmp_path / "a", progress=False)
    other = checkout(spec, tmp_path / "b", progress=False)
    head = str(pygit2.Repository(str(first)).head.target)
    assert first == again
    assert head == str(pygit2.Repository(str(other)).head.target)
    tree = pygit2.Repository(str(first)).head.peel(pygit2.Commit).tree
    assert source_paths(spec)[0] in tree

    (first.parent / "complete").unlink()
    rebuilt = checkout(spec, tmp_path / "a", progress=False)
    assert (rebuilt.parent / "complete").exists()
    assert str(pygit2.Repository(str(rebuilt)).head.target) == head


def test_parse_size_names_and_rejects() -> None:
    """Named sizes keep their file counts; other sizes scale; nonsense is a ValueError."""
    assert parse_size("10MB").source_files == 2_000
    assert parse_size("3gb").total_bytes == 3 << 30
    assert 8 <= parse_size("1MB").source_files < 2_000
    with pytest.raises(ValueError):
        parse_size("lots")


def test_report_has_every_operation_and_serializes(tmp_path: Path) -> None:
    """A 1 MB run with 3 iterations reports a positive median for every operation."""
    backend = _working_backend()
    if backend is None:
        reasons = {n: c.unavailable_reason() for n, c in sandboxes.backends.items()}
        pytest.skip(f"no sandbox backend works here: {reasons}")
    report = run(["1MB"], runs=3, backend=backend, cache=tmp_path / "cache", progress=False)

    size = report["sizes"]["1MB"]
    assert size["setup_ms"] > 0
    for op in OPS:
        stats = size["ops"][op]
        assert stats["runs"] >= 3, op
        assert stats["median_ms"] > 0, op
        assert stats["p90_ms"] >= stats["median_ms"], op
    assert report["machine"]["backend"] == backend
    assert json.loads(json.dumps(report)) == report
