"""`corral bench cooperbench grade --patches DIR`: grade patches somebody else made
(CooperBench's published runs, a lab's own) under the chosen merge rules, and write the
same results.jsonl and report as a run.

The units are what `_given.discover` finds under DIR (CooperBench's layout, or the
user's `--layout` template); each is graded as its agents' patches, no agent runs
(`RunSpec.given`; results name the agent `given`). A coop unit is graded in setting
`coop`, a solo unit in `solo`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from coordinator.cli_shared import console, err

from ._cli import (
    CacheOpt,
    DatasetOpt,
    JsonFlag,
    JsonOutOpt,
    ReposOpt,
    _check,
    _csv,
    _fail,
    _report,
    _run_with_progress,
    app,
)
from ._given import DEFAULT_LAYOUT, GivenUnit, discover
from ._spec import Given, RunSpec

__all__ = ["given_units", "grade_cmd"]


def given_units(units: list[GivenUnit]) -> Given:
    """The run's `RunSpec.given` from what discovery found. Raises ValueError for a unit
    without its task, or with fewer than two features (coop)."""
    out: dict[tuple[str, tuple[int, ...], str], tuple[str, ...]] = {}
    for u in units:
        if not u.repo or not u.task_id:
            raise ValueError(f"{u.path}: no repository or task in its path (a --layout "
                             "needs {repo} and {task})")
        if u.setting == "coop" and len(u.features) < 2:
            raise ValueError(f"{u.path}: a coop unit needs two features or more")
        out[(u.key, u.features, u.setting)] = u.patches
    return out


@app.command("grade")
def grade_cmd(
    patches: Annotated[Path, typer.Option(
        help="Directory of given patches: CooperBench's layout ({solo,coop}/<repo>/<task>/"
             "f<a>_f<b>/ with agent<a>.patch, agent<b>.patch or solo.patch), or --layout.")],
    layout: Annotated[str | None, typer.Option(
        help="A unit directory's path under --patches, with {setting}, {repo}, {task} and "
             f"{{features}} (default {DEFAULT_LAYOUT}, or without {{setting}}).")] = None,
    dataset: DatasetOpt = None,
    repos: ReposOpt = None,
    merge: Annotated[str, typer.Option(help="Merge policies, comma-separated: plain "
                                       "(0.0.29), union (<= 0.0.15).")] = "plain",
    test_timeout: Annotated[float, typer.Option(help="Seconds per test command.")] = 600.0,
    workers: Annotated[int, typer.Option(help="Units graded at once.")] = 2,
    env_cache: CacheOpt = None,
    out: Annotated[Path | None, typer.Option(
        help="Run directory (results.jsonl, traces, patches, logs, report).")] = None,
    backend: Annotated[str | None, typer.Option(help="Sandbox backend for scopes.")] = None,
    json_flag: JsonFlag = False,
    json_out: JsonOutOpt = None,
    markdown: Annotated[Path | None, typer.Option(help="Write the table as Markdown.")] = None,
    png: Annotated[Path | None, typer.Option("--plot", help="Write the PNG plot here "
                                           "(default OUT/report.png).")] = None,
) -> None:
    """Grade given patches (no agent runs) by CooperBench's rules and print pass rates;
    an agent's empty patch is flagged, a patch that does not apply is missing_input."""
    name = dataset.resolve().name if dataset else "mini"
    out_dir = (out or Path(".corral-bench") / "cooperbench" / f"{name}-graded").resolve()
    try:
        given = given_units(discover(patches.resolve(), layout))
        if not given:
            raise ValueError(f"no units under {patches} (layout {layout or DEFAULT_LAYOUT})")
        settings = tuple(s for s in ("solo", "coop") if any(k[2] == s for k in given))
        spec = RunSpec(
            out=out_dir, dataset=dataset.resolve() if dataset else None,
            repos=repos.resolve() if repos else None, settings=settings,  # type: ignore[arg-type]
            merges=_check(_csv(merge), ("plain", "union"), "--merge"), agent="given",
            test_timeout=test_timeout, workers=workers,
            env_cache=env_cache.resolve() if env_cache else None, backend=backend,
            given=given)
        report = _run_with_progress(spec, "local", None)
    except (ValueError, LookupError, FileNotFoundError) as e:
        _fail(str(e))
        return
    _report(spec, report, name, "local", err if json_flag else console, png=png,
            markdown=markdown, json_flag=json_flag, json_out=json_out)
