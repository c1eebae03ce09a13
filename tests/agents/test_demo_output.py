"""What `corral demo` prints about its trace: a command to read it only when the trace
is kept (--state), and that command's graph names each branch."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

from typer.testing import CliRunner

from coordinator.cli import app


def test_without_state_no_command_names_the_deleted_trace(tmp_path: Path) -> None:
    """Without --state the trace is in a temporary directory gone when the demo ends: no
    printed `git --git-dir` points at it, and the output says how to keep it."""
    result = CliRunner().invoke(app, ["demo"])
    assert result.exit_code == 0, result.output
    dirs = re.findall(r"--git-dir (\S+)", result.output)
    assert not [d for d in dirs if not Path(d).exists()], dirs
    assert "--state DIR keeps it" in result.output


def test_with_state_the_printed_command_shows_the_graph_with_ref_names(tmp_path: Path) -> None:
    """With --state the printed `git log` command works as printed, and both it and the
    graph the demo printed label the scopes' branches and bob's rewound one."""
    state = tmp_path / "state"
    result = CliRunner().invoke(app, ["demo", "--state", str(state)])
    assert result.exit_code == 0, result.output
    [command] = re.findall(r"The trace \((git --git-dir .*)\):$", result.output, re.MULTILINE)
    out = subprocess.run(shlex.split(command), capture_output=True, text=True, check=True).stdout
    for ref in ("refs/corral/scopes/root", "refs/corral/scopes/alice",
                "refs/corral/scopes/bob", "refs/corral/archive/bob/"):
        assert ref in out, out
        assert ref in result.output
