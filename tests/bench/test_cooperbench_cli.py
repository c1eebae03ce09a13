"""What `corral bench cooperbench` prints and how it exits, run as a user runs it (a
subprocess, its output piped): an all-error run fails, the help shows each option's text
whole, the report says where its plot is and the plot's legend covers no bar."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.cooperbench._cli import main as cli_main
from bench.cooperbench._records import PairResult
from bench.cooperbench._report import plot, summarize
from bench.cooperbench._store import ResultStore

CORRAL = [sys.executable, "-m", "coordinator.cli"]


def _bench(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # As from a user's shell: no $COLUMNS (the test runner may export one).
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    return subprocess.run([*CORRAL, "bench", "cooperbench", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_a_run_where_every_unit_errors_exits_non_zero_and_says_why(tmp_path: Path) -> None:
    """When no task can be prepared (here: the cache is a file), every unit errors: the
    run exits 1, names the reason once, and its table (on stderr with --json, piped)
    keeps whole column names."""
    cache = tmp_path / "not-a-directory"
    cache.write_text("")
    r = _bench("--task", "textkit", "--pairs", "1-2", "--env-cache", str(cache), "--json",
               "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    assert "every unit errored" in r.stderr
    assert "preparing the task" in r.stderr
    header = next(ln for ln in r.stderr.splitlines() if "┃ setting" in ln)
    for column in ("setting", "pairs", "passed", "pass rate", "errors", "merge clean",
                   "tokens/pair"):
        assert f" {column} " in header, header


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str],
                                                                 Path]:
    """kvstore's pairs 1-2 (they conflict) and 3-4 (clean), coop only."""
    out = tmp_path_factory.mktemp("small")
    r = _bench("--task", "kvstore", "--pairs", "1-2,3-4", "--settings", "coop",
               "--out", str(out / "run"), cwd=out)
    return r, out / "run"


@pytest.mark.slow
def test_the_report_prints_where_its_plot_is(small_run) -> None:  # type: ignore[no-untyped-def]
    """A run that graded its units exits 0 and prints the plot's path, which exists."""
    r, out = small_run
    assert r.returncode == 0, r.stderr
    assert f"plot: {out / 'report.png'}" in r.stdout
    assert (out / "report.png").stat().st_size > 0
    assert "errored" not in r.stdout + r.stderr


def _overlap(a, b) -> bool:  # type: ignore[no-untyped-def]
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


@pytest.mark.slow
def test_the_merge_outcome_legend_covers_no_bar(small_run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The merge-outcome chart's legend lies clear of every bar (a coop bar of all the
    pairs reaches the top of its axes) and inside the figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    r, out = small_run
    assert r.returncode == 0, r.stderr
    results: list[PairResult] = ResultStore.read(out / "results.jsonl")
    fig = plot(summarize(results), results, tmp_path / "report.png")
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    ax = fig.axes[1]
    legend = ax.get_legend().get_window_extent(renderer)
    bars = [p.get_window_extent(renderer) for p in ax.patches if p.get_height() > 0]
    assert bars
    assert not [b for b in bars if _overlap(legend, b)]
    page = fig.bbox
    assert page.x0 <= legend.x0 and legend.x1 <= page.x1
    assert page.y0 <= legend.y0 and legend.y1 <= page.y1


@pytest.mark.slow  # near the 8 s fast budget on a loaded 2-core machine
def test_help_shows_every_option_text_whole(tmp_path: Path) -> None:
    """`--help`, piped (80 columns), prints each option's help text whole: no word
    cut with "…"."""
    r = _bench("--help", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "…" not in r.stdout
    from typer.main import get_command

    from bench.cooperbench._cli import app

    flat = " ".join(r.stdout.split())
    for param in get_command(app).params:
        text = getattr(param, "help", None)
        if text:
            assert " ".join(text.split()) in flat, param.name
    assert re.search(r"\(pallets_click_task/task2068\)", flat)


@pytest.mark.slow
def test_cli_json_flag_and_old_form(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """`--json` prints the report on stdout, `-o FILE` writes it, and the old
    `--json FILE` still writes FILE with a note."""
    monkeypatch.chdir(tmp_path)
    args = ["conflicts", "--task", "textkit", "--env-cache", str(tmp_path / "c")]
    with pytest.raises(SystemExit) as done:
        cli_main([*args, "--json"])
    assert done.value.code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["totals"]["pairs"] >= 1
    with pytest.raises(SystemExit):
        cli_main([*args, "-o", str(tmp_path / "a.json")])
    assert json.loads((tmp_path / "a.json").read_text()) == data
    with pytest.raises(SystemExit):
        cli_main([*args, "--json", str(tmp_path / "b.json")])
    captured = capsys.readouterr()
    assert "old form" in captured.err and not captured.out.strip().startswith("{")
    assert json.loads((tmp_path / "b.json").read_text()) == data
