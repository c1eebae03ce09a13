"""Benchmarks that must be killed (SIGKILL, then a timed reopen) run their phases
in a child interpreter that prints its figures as one JSON line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

__all__ = ["run_child"]


def run_child(module: str, args: Sequence[str], timeout: float) -> dict[str, Any]:
    """Run `python -m MODULE ARGS` and take the last JSON line it printed before it
    ended (by itself, or killed by us at `timeout`). Raises RuntimeError with its
    stderr when it printed none."""
    proc = subprocess.run([sys.executable, "-m", module, *args],
                          capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        # the whole stderr goes to a file: the first error is often far from the end
        fd, log = tempfile.mkstemp(prefix=f"corral-{module.replace('.', '-')}-", suffix=".log")
        with os.fdopen(fd, "w") as f:
            f.write(proc.stderr)
        raise RuntimeError(f"{module} {' '.join(args)} failed ({proc.returncode}); its stderr "
                           f"is in {log}; the end of it: {proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result
