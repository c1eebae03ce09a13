"""`corral bench server` measures a real server and renders its table."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench import server

pytestmark = pytest.mark.slow  # a benchmark run against a server


def test_bench_server_reports_writes_reads_and_coordinator_time():
    """One short round with 2 clients: every figure is there and writes were committed."""
    report = server.run([2], seconds=0.3)
    [row] = report["rows"]
    assert row["clients"] == 2
    assert row["write"]["ops"] > 0 and row["write"]["not_ok"] == 0
    assert row["read"]["ops"] > 0
    assert row["coordinator_write"]["n"] >= row["write"]["ops"]
    assert row["coordinator_write"]["p99_ms"] >= row["coordinator_write"]["p50_ms"] > 0
    json.dumps(report)
    from rich.console import Console

    console = Console(record=True, width=200)
    console.print(server.render(report))
    text = console.export_text()
    assert "writes" in text and "targets: writes" in text


def test_grafana_dashboard_uses_only_exported_metric_names():
    """Every metric the dashboard queries is one the coordinator exports."""
    from coordinator.scopes._metrics import Metrics

    text = (Path(__file__).parents[2] / "dashboards/grafana/corral.json").read_text()
    dash = json.loads(text)
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"\b(corral_[a-z_]+)", e)}
    from prometheus_client import generate_latest

    metrics = Metrics()
    metrics.tokens(1, 1, 1)
    exported = generate_latest(metrics.registry).decode() + "corral_layer_bytes"
    for name in used:
        assert name.removesuffix("_bucket") in exported or name in exported, name
