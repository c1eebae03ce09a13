"""`corral`'s output piped into a file or another program (no terminal, no $COLUMNS)
wraps nothing: words stay whole, a line greps, a table keeps its natural width."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# As from a user's shell: no $COLUMNS (the test runner may export one).
ENV = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}


def _piped(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=ENV,
                          capture_output=True, text=True, timeout=120, check=True)


def test_a_long_line_and_a_wide_table_are_not_cut_at_80_columns(tmp_path: Path) -> None:
    """The shared consoles (stdout and stderr) print a 300-character line as one line,
    and a 14-column table (the soak's) with every column name whole."""
    r = _piped(
        "from coordinator.cli_shared import console, err\n"
        "from rich.table import Table\n"
        "console.print(' '.join(f'word{i}' for i in range(50)))\n"
        "err.print(' '.join(f'word{i}' for i in range(50)))\n"
        "cols = ('t_s', 'effects', 'rss_mb', 'fds', 'fds_deleted', 'layers_max', 'layer_dirs',"
        " 'mounts', 'sandboxes', 'sandbox_pss_mb', 'cgroups', 'journal_mb', 'packs',"
        " 'registered_scopes')\n"
        "t = Table(*cols, title='Soak')\n"
        "t.add_row(*('12345' for _ in cols))\n"
        "console.print(t)\n", tmp_path)
    line = " ".join(f"word{i}" for i in range(50))
    assert line in r.stdout.splitlines() and line in r.stderr.splitlines()
    header = next(ln for ln in r.stdout.splitlines() if "t_s" in ln)
    for name in ("fds_deleted", "sandbox_pss_mb", "registered_scopes", "journal_mb"):
        assert f" {name} " in header, header


def test_columns_still_sets_the_width(tmp_path: Path) -> None:
    """$COLUMNS, when the user sets it, is the width even when piped."""
    r = subprocess.run([sys.executable, "-c", "from coordinator.cli_shared import console\n"
                        "console.print(' '.join(f'word{i}' for i in range(50)))"],
                       cwd=tmp_path, env={**ENV, "COLUMNS": "40"}, capture_output=True,
                       text=True, timeout=120, check=True)
    assert max(len(ln) for ln in r.stdout.splitlines()) <= 40


@pytest.mark.slow
def test_piped_demo_keeps_the_blocked_reason_on_one_line(tmp_path: Path) -> None:
    """`corral demo | cat`: the guard's reason for blocking bob is one line, whole."""
    r = subprocess.run([sys.executable, "-m", "coordinator.cli", "demo"], cwd=tmp_path,
                       env=ENV, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    [reason] = [ln for ln in r.stdout.splitlines() if "reason:" in ln]
    assert "conflict with changes by scope alice (effect alice#1, commit" in reason
    assert reason.rstrip().endswith(")")
