"""The supervised oracle claim, on the bundled mini suite: with the gold patches as the
agents' work, `supervised` (the conflict guard and its handoffs, N agents) passes every
group whose gold patches pass when one agent applies them in sequence (solo), for
groups of 2, 3 and 4 features. Real scopes, real git, real pytest runs (slow)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.cooperbench import RunSpec, run

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("size", [2, 3, 4])
def test_supervised_passes_every_group_solo_passes(size: int, tmp_path: Path) -> None:
    """Every N-combination of every mini task's features, solo and supervised; among
    them groups that conflict (where the guard blocks and a handoff follows) and groups
    whose handoff puts a feature after a later one (invoice 4-5, which must start over
    in agent order)."""
    spec = RunSpec(out=tmp_path, group_size=size, settings=("solo", "supervised"),
                   workers=2)
    results = run(spec)["results"]
    assert not [(r.task, r.group, r.reason) for r in results if r.status == "error"]
    by = {(r.task, r.group, r.setting): r for r in results}
    solo = [(t, g) for (t, g, s), r in by.items() if s == "solo" and r.passed]
    assert solo
    lost = [(t, g, by[t, g, "supervised"].reason) for t, g in solo
            if not by[t, g, "supervised"].passed]
    assert lost == []
    handed = [r for r in results if r.setting == "supervised" and r.handoffs]
    assert any(r.passed for r in handed)  # a pass that needed a handoff
    assert all(r.merge_status == "clean" for r in results if r.setting == "supervised")
    if size == 2:
        assert by["mini_invoice_task/task1", (4, 5), "supervised"].passed
    if size >= 3:
        assert any(r.handoffs >= 2 for r in handed)  # a chain: a receiver handed on
