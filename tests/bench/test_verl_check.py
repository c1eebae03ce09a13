"""`corral bench verl`: the tree it grows and exports, and its refusal where verl does not
import (the check with verl itself runs with $CORRAL_VERL_PYTHON; its result is
bench/results/verl.json)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench import verl_check
from coordinator.cli import app
from tests.agents._helpers import NO_KEYS

pytestmark = pytest.mark.slow


def _verl_imports(python: str) -> bool:
    return subprocess.run([python, "-c", "import verl"], capture_output=True).returncode == 0


def test_the_check_exports_one_verl_record_per_leaf(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    for name in NO_KEYS:
        monkeypatch.delenv(name, raising=False)
    path, leaves = asyncio.run(verl_check.grow_and_export(tmp_path, 2))
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert leaves == 4 and len(rows) == 4  # two model calls: two forks of two siblings
    assert {r["reward_score"] for r in rows} == {0.0, 1.0}  # seeds 0 and 1 answer 0 and 1
    for r in rows:
        assert len(r["response_ids"]) == len(r["response_mask"]) == len(r["response_logprobs"])


@pytest.mark.skipif(_verl_imports(sys.executable), reason="verl imports here")
def test_without_verl_the_check_exits_2_and_says_so(tmp_path: Path) -> None:
    records = tmp_path / "r.jsonl"
    records.write_text("")
    with pytest.raises(verl_check.VerlMissing, match="verl does not import"):
        verl_check.validate(sys.executable, records)
    out = CliRunner().invoke(app, ["bench", "verl", "--python", sys.executable, "-k", "1"])
    assert out.exit_code == 2 and "CORRAL_VERL_PYTHON" in out.output
