"""`corral bench cooperbench census` (the census checked against CooperBench's own
script) and `check` (gradeability); `_cli` registers them on its app."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from coordinator.cli_shared import console, err

from ._cli_options import (
    CacheOpt,
    DatasetOpt,
    FeaturesOpt,
    GroupSizeOpt,
    GroupsOpt,
    JsonFlag,
    JsonOutOpt,
    PairsOpt,
    ReposOpt,
    SubsetOpt,
    TaskOpt,
    emit_json,
    fail,
)
from ._dataset import mini_suite
from ._repos import base_repo
from ._run import plan
from ._spec import RunSpec

__all__ = ["census_cmd", "check_cmd"]


def census_cmd(
    dataset: DatasetOpt = None,
    repos: ReposOpt = None,
    task: TaskOpt = None,
    pairs: PairsOpt = None,
    group_size: GroupSizeOpt = None,
    groups: GroupsOpt = None,
    script_repo: Annotated[Path | None, typer.Option(
        help="A git repository of cooperbench/CooperBench (default: "
             "<repos>/cooperbench+CooperBench/repo).")] = None,
    script_ref: Annotated[str, typer.Option(help="The script's commit or branch.")] = "main",
    env_cache: CacheOpt = None,
    json_flag: JsonFlag = False,
    json_out: JsonOutOpt = None,
) -> None:
    """The census checked against CooperBench's own check_gold_conflicts.py: its filter
    and merge steps, read from its source, run on every pair (of every group), and the
    dataset's gold_conflict_report.json. Exits 1 when anything differs."""
    from ._census_check import PairScript, check_task, report_comparison, script_source

    ds = dataset.resolve() if dataset else mini_suite() / "dataset"
    cache = (env_cache or Path(".corral-bench") / "cache").resolve()
    spec = RunSpec(out=cache, dataset=ds if dataset else None,
                   repos=repos.resolve() if repos else None, task=task, pairs=pairs,
                   group_size=group_size, groups=groups)
    where = script_repo or (repos.resolve() / "cooperbench+CooperBench" / "repo" if repos
                            else None)
    if where is None:
        fail("give --script-repo (a git repository of cooperbench/CooperBench) or --repos")
        return
    try:
        tasks, chosen = plan(spec)
        script = PairScript(script_source(where, script_ref))
    except (ValueError, FileNotFoundError) as e:
        fail(str(e))
        return
    checks = []
    for key in sorted({g.task for g in chosen}):
        t = tasks[key]
        checks.append(check_task(script, t, base_repo(t, spec.repos_dir, cache),
                                 cache / "census-check" / key.replace("/", "-"),
                                 [g for g in chosen if g.task == key]))
    out = err if json_flag else console
    table = Table("task", "groups", "conflict (fold)", "script pairs", "script differs",
                  "filter differs", title=f"Census against {where}: "
                  f"check_gold_conflicts.py at {script_ref}")
    for c in checks:
        table.add_row(c.task, str(len(c.rows)), str(sum(r.verdict == "conflict" for r in c.rows)),
                      str(c.pairs), str(len(c.differences)), str(len(c.filter_differences)))
    out.print(table)
    data: dict[str, Any] = {"script_ref": script_ref, "tasks": [c.as_dict() for c in checks]}
    cmp = report_comparison(checks, ds / "gold_conflict_report.json")
    if cmp is not None:
        data["report"] = cmp
        out.print(f"gold_conflict_report.json: {cmp['compared']} pairs compared, "
                  f"{len(cmp['differences'])} differ")
    emit_json(data, json_flag, json_out)
    if any(c.differences or c.filter_differences for c in checks) or (
            cmp is not None and cmp["differences"]):
        raise typer.Exit(1)


def check_cmd(
    dataset: DatasetOpt = None,
    repos: ReposOpt = None,
    subset: SubsetOpt = None,
    task: TaskOpt = None,
    features: FeaturesOpt = None,
    env_cache: CacheOpt = None,
    backend: Annotated[str | None, typer.Option(help="Sandbox backend for scopes.")] = None,
    test_timeout: Annotated[float, typer.Option(help="Seconds per test command.")] = 600.0,
    json_flag: JsonFlag = False,
    json_out: JsonOutOpt = None,
) -> None:
    """Which features can be graded: each feature's tests on the base (must fail) and
    with its gold patch (must pass), CooperBench 0.0.29's rule, in the task's own
    environment. Lists what breaks the rule."""
    from ._gradeable import FeatureCheck, check_task

    cache = (env_cache or Path(".corral-bench") / "cache").resolve()
    spec = RunSpec(out=cache.parent / "check", dataset=dataset.resolve() if dataset else None,
                   repos=repos.resolve() if repos else None, subset=subset, task=task,
                   features=features, env_cache=cache, backend=backend,
                   test_timeout=test_timeout)
    try:
        tasks, chosen = plan(spec)
    except (ValueError, FileNotFoundError) as e:
        fail(str(e))
        return
    wanted: dict[str, set[int]] = {}
    for p in chosen:
        wanted.setdefault(p.task, set()).update(p.ids)
    out = err if json_flag else console
    rows: list[FeatureCheck] = []
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err, transient=True) as bar:
        progress = bar.add_task("features", total=sum(len(f) for f in wanted.values()))
        for key in sorted(wanted):
            rows += asyncio.run(check_task(tasks[key], spec, sorted(wanted[key]),
                                           lambda _: bar.advance(progress)))
    table = Table("task", "feature", "base", "gold", "gradeable", "why",
                  title="Gradeability (0.0.29: fails on base, passes with its gold patch)")
    for r in rows:
        table.add_row(r.task, str(r.feature), _counts(r.base), _counts(r.gold),
                      "yes" if r.gradeable else "[red]no[/]", escape(r.why))
    out.print(table)
    good = sum(r.gradeable for r in rows)
    errors = sum(bool(r.error) for r in rows)
    out.print(f"{good} of {len(rows)} features are gradeable")
    emit_json({"features": [r.as_dict() for r in rows],
                "totals": {"features": len(rows), "gradeable": good,
                           "not_gradeable": len(rows) - good - errors, "error": errors}},
               json_flag, json_out)


def _counts(run: Any) -> str:
    if run is None:
        return "-"
    verdict = "pass" if run.passed else "timeout" if run.timed_out else "fail"
    return f"{verdict} {run.tests_passed}/{run.tests_passed + run.tests_failed}"
