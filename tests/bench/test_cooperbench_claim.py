"""The supervised oracle claim, on the bundled mini suite: with the gold patches as the
agents' work, `supervised` (the conflict guard and its handoffs, N agents) and
`supervised-team` (the same as one team: the lead's task list, claims, the scratchpad)
pass every group whose gold patches pass when one agent applies them in sequence
(solo), for groups of 2, 3 and 4 features. Real scopes, real git, real pytest runs (slow)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.cooperbench import RunSpec, run

pytestmark = pytest.mark.slow


@pytest.mark.timeout(1800)  # every group of the mini suite in three settings, N = 4 too
@pytest.mark.parametrize("size", [2, 3, 4])
def test_supervised_passes_every_group_solo_passes(size: int, tmp_path: Path) -> None:
    """Every N-combination of every mini task's features, solo and supervised; among
    them groups that conflict (where the guard blocks and a handoff follows) and groups
    whose handoff puts a feature after a later one (invoice 4-5, which must start over
    in agent order)."""
    spec = RunSpec(out=tmp_path, group_size=size,
                   settings=("solo", "supervised", "supervised-team"), workers=2)
    results = run(spec)["results"]
    assert not [(r.task, r.group, r.reason) for r in results if r.status == "error"]
    by = {(r.task, r.group, r.setting): r for r in results}
    solo = [(t, g) for (t, g, s), r in by.items() if s == "solo" and r.passed]
    assert solo
    for setting in ("supervised", "supervised-team"):
        lost = [(t, g, by[t, g, setting].reason) for t, g in solo
                if not by[t, g, setting].passed]
        assert lost == [], setting
        handed = [r for r in results if r.setting == setting and r.handoffs]
        assert any(r.passed for r in handed)  # a pass that needed a handoff
        assert all(r.merge_status == "clean" for r in results if r.setting == setting)
        if size == 2:
            assert by["mini_invoice_task/task1", (4, 5), setting].passed
        if size >= 3:
            assert any(r.handoffs >= 2 for r in handed)  # a chain: a receiver handed on
    # The team's task list ends done: every feature's task, by whoever holds it.
    team = [r for r in results if r.setting == "supervised-team" and r.passed]
    assert team and all(len(r.team_tasks) == size and all(" done " in t for t in r.team_tasks)
                        for r in team)
