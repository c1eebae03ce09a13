"""The long-history, many-scope and saturating-writer rows and the soak run end
to end on small numbers (behaviour only, no timings)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import sandboxes
from bench import scaling, soak

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # slow: soak and scaling runs


def _skip_without_backend() -> None:
    if not any(c.unavailable_reason() is None for c in sandboxes.backends.values()):
        pytest.skip("no sandbox backend works here")


def test_scaling_rows_report_every_measure_and_a_reopen(tmp_path: Path) -> None:
    """An 80-effect history, 1 and 3 scopes and a 300-write burst each report
    their figures, RSS split into anonymous and file-backed memory; the killed
    processes' state directories reopen with their scopes; discarded scopes
    are not registered; with a tight journal bound the burst is held back
    (backpressure) and the journal never holds much more than two
    generations."""
    _skip_without_backend()
    report = scaling.run(history=[80], scopes=[1, 3], saturate=300, cache=tmp_path / "cache",
                         saturate_bound=20)
    [row] = report["history"]
    for key in ("rewind_ms", "log_page_ms", "log_page_middle_ms", "log_all_ms",
                "checkpoint_one_write_ms", "rss_after_checkpoint_mb", "reopen_s"):
        assert row[key] > 0, key
    for label in ("start", "after_writes", "after_checkpoint", "end", "after_reopen"):
        total, anon, file = (row[f"rss_{label}{part}_mb"] for part in ("", "_anon", "_file"))
        assert anon > 0 and file > 0 and abs(anon + file - total) <= 2, label
    assert row["rss_peak_mb"] >= row["rss_after_writes_mb"]
    assert row["scopes"] == 2  # root and the writer, after the kill
    assert [r["registered"] for r in report["scopes"]] == [2, 4]
    default, tight = report["saturate"]
    assert default["bound_objects"] == 16_384 and tight["bound_objects"] == 20
    for burst in (default, tight):
        assert burst["writes_per_s"] > 0 and burst["reopen_s"] > 0
        assert burst["journal_peak_objects"] > 0 and burst["rss_after_checkpoint_anon_mb"] > 0
    assert default["backpressure_waits"] is not None
    assert tight["backpressure_waits"] and tight["backpressure_s"] > 0
    assert tight["checkpoints_during"] >= 5
    # two generations of 20 objects, plus the objects of effects in flight
    assert tight["journal_peak_objects"] <= 2 * 20 + 10
    assert json.loads(json.dumps(report)) == report
    assert len(scaling.render(report)) == 3


def test_soak_samples_resources_and_reopens(tmp_path: Path) -> None:
    """Four scopes for a few seconds: samples carry every resource, discarded
    scopes leave the registry, and the state reopens after the kill."""
    _skip_without_backend()
    report = soak.run(scopes=4, minutes=0.1, every=2, cache=tmp_path / "cache")
    assert report["effects"] > 0 and len(report["samples"]) >= 3
    last = report["samples"][-1]
    for key in ("rss_mb", "fds", "fds_deleted", "layers_max", "mounts", "journal_mb", "packs"):
        assert key in last
    assert last["registered_scopes"] <= 1 + 4 * 2  # root, the agents, a child each at most
    assert report["scopes_after_reopen"] >= 5 and report["reopen_s"] > 0
    soak.render(report)
