"""Fuzz the API from its own OpenAPI document (schemathesis): no input, valid
or not, gets a 5xx. The server runs in a subprocess on 127.0.0.1; exec (random
argv would run random programs) and the WebSocket routes are left out."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402

pytestmark = pytest.mark.slow  # schemathesis against a server

ROOT = Path(__file__).parents[2]
ADMIN = "a.fuzz-admin"
EXAMPLES = 20


@pytest.fixture
def server(tmp_path, sample_repo):
    proc = subprocess.Popen(
        [sys.executable, "-m", "coordinator.cli", "serve", "--state", str(tmp_path / "state"),
         "--repo", str(sample_repo), "--port", "0", "--max-body", "65536"],
        stdout=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "CORRAL_ADMIN_TOKEN": ADMIN},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("listening on "), line
    yield line.split()[-1]
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=20)


def test_fuzzed_requests_never_get_a_server_error(server):
    import requests

    schema = schemathesis.openapi.from_url(server + "/openapi.json")
    session = requests.Session()
    headers = {"Authorization": f"Bearer {ADMIN}"}
    # a scope with content, so generated names sometimes hit something real
    session.post(server + "/v1/scopes/root/fork", json={"name": "a"}, headers=headers)
    failures: list[str] = []
    ops = [r.ok() for r in schema.get_all_operations()]
    ops = [op for op in ops if not op.definition.raw.get("x-websocket")
           and not op.path.endswith("/exec")]
    assert len(ops) >= 20
    for op in ops:
        _fuzz(op, server, session, headers, failures)
    assert failures == []


def _fuzz(op, server, session, headers, failures) -> None:
    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
    @given(case=op.as_strategy())
    def check(case) -> None:
        response = case.call(base_url=server, session=session, headers=headers, timeout=10)
        if response.status_code >= 500:
            failures.append(f"{op.method.upper()} {op.path}: {response.status_code} "
                            f"{response.text[:300]} for {case.body!r} {case.path_parameters}")

    check()
