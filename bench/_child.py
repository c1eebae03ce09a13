"""Benchmarks that must be killed (SIGKILL, then a timed reopen) run their phases
in a child interpreter that prints its figures as one JSON line."""

from __future__ import annotations

import json
import subprocess
import sys
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
        raise RuntimeError(f"{module} {' '.join(args)} failed ({proc.returncode}): "
                           f"{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result
