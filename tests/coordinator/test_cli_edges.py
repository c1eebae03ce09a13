"""The command line's rough edges, each as a new user met it: clear one-line errors
(no tracebacks), a kept admin token, a reusable demo state, the client's filters."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import aiohttp
import pytest
from typer.testing import CliRunner

from coordinator.cli import app

from .server_fixtures import serve

CORRAL = [sys.executable, "-c", "from coordinator.cli import main; main()"]


@pytest.mark.parametrize("command", [["demo"], ["serve", "--state", "s"],
                                     ["run", "--repo", ".", "--task", "t", "--model", "o/m"]])
def test_unknown_backend_is_a_usage_error_not_a_traceback(command: list[str]) -> None:
    """`--backend bogus` names the backends there are and exits 2, before any work."""
    result = CliRunner().invoke(app, [*command, "--backend", "bogus"])
    assert result.exit_code == 2
    assert "unknown backend 'bogus'" in result.output and "copy" in result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.slow
def test_busy_port_is_one_line_not_a_traceback(tmp_path: Path, sample_repo: Path) -> None:
    """Serving on a port in use says so in one line and exits 1."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = subprocess.run(
            [*CORRAL, "serve", "--state", str(tmp_path / "s"), "--repo", str(sample_repo),
             "--port", str(port), "--backend", "copy"],
            capture_output=True, text=True, timeout=120,
            env={**os.environ, "CORRAL_ADMIN_TOKEN": "a.x"})
    assert proc.returncode == 1
    message = " ".join(proc.stderr.split())  # rich wraps at the terminal's width
    assert f"error: cannot listen on 127.0.0.1:{port}: address already in use" in message
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) <= 3


async def _start(state: Path, repo: Path) -> tuple[asyncio.subprocess.Process, str, list[str]]:
    env = {k: v for k, v in os.environ.items() if k != "CORRAL_ADMIN_TOKEN"}
    proc = await asyncio.create_subprocess_exec(
        *CORRAL, "serve", "--state", str(state), "--repo", str(repo), "--port", "0",
        "--backend", "copy", stdout=asyncio.subprocess.PIPE, env=env)
    assert proc.stdout is not None
    lines: list[str] = []
    while not lines or not lines[-1].startswith("listening on "):
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        assert line, f"the server exited: {lines}"
        lines.append(line.strip())
    return proc, lines[-1].removeprefix("listening on "), lines


@pytest.mark.slow
async def test_admin_token_survives_a_restart(tmp_path: Path, sample_repo: Path) -> None:
    """Without a token given, serve makes one, keeps it in STATE/admin-token (0600),
    and a restarted server accepts the same token (the dashboard stays logged in)."""
    state = tmp_path / "s"
    proc, url, lines = await _start(state, sample_repo)
    try:
        [printed] = [x.removeprefix("admin token: ") for x in lines if x.startswith("admin token")]
    finally:
        proc.send_signal(signal.SIGTERM)
        await proc.wait()
    kept = state / "admin-token"
    assert kept.read_text().strip() == printed
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    proc, url, lines = await _start(state, sample_repo)
    try:
        assert not any(x.startswith("admin token") for x in lines)  # not printed again
        async with aiohttp.ClientSession() as http, http.get(
                url + "/v1/gate/pending", headers={"Authorization": f"Bearer {printed}"}) as r:
            assert r.status == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        await proc.wait()


@pytest.mark.slow
def test_demo_leaves_no_temp_dir_and_reuses_its_state(tmp_path: Path) -> None:
    """Two demo runs on one --state both succeed and leave no corral-demo-* temp dir;
    a non-empty directory that is not a demo's state is refused, untouched."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    # COLUMNS: rich wraps an error at the terminal width; a long temp path would split
    # the message this test looks for.
    env = {**os.environ, "TMPDIR": str(tmp), "COLUMNS": "500"}
    state = tmp_path / "state"
    for _ in range(2):
        proc = subprocess.run([*CORRAL, "demo", "--state", str(state)], capture_output=True,
                              text=True, timeout=300, env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (state / "trace.git").is_dir()
    assert list(tmp.iterdir()) == []
    other = tmp_path / "mine"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    proc = subprocess.run([*CORRAL, "demo", "--state", str(other)], capture_output=True,
                          text=True, timeout=300, env=env)
    assert proc.returncode == 1 and "not empty and not an earlier demo's state" in proc.stderr
    assert (other / "keep.txt").read_text() == "mine"
    assert tempfile.gettempdir()  # (the test process's own temp dir is untouched)


async def _scopes_of(events, n: int, got: list[str]) -> None:
    """Append the scopes of the first `n` events to `got`."""
    async for e in events:
        got.append(e["effect"]["scope"])
        if len(got) == n:
            return


@pytest.mark.slow
async def test_client_event_filters_take_one_name_or_several(tmp_path, sample_repo) -> None:
    """`events(scope="bob")` works (it raised TypeError) and `scopes="bob"` means the
    scope bob, not the scopes b, o, b."""
    async with serve(tmp_path / "s", sample_repo) as srv:
        c = srv.client
        await c.fork("root", "alice")
        await c.fork("root", "bob")
        for filters in ({"scope": "bob"}, {"scopes": "bob"}, {"scopes": ["bob"]}):
            # subscribe: live once entered, so nothing written after can be missed
            async with c.subscribe(**filters, type="effect") as stream:
                await c.write("alice", "a.txt", b"a")
                await c.write("bob", "b.txt", b"b")
                event = await asyncio.wait_for(anext(stream), 10)
            assert event["effect"]["scope"] == "bob", filters
            # events() takes the same filters. It subscribes when first awaited, which
            # nothing signals: write to both until two events came through (once it
            # listens, a write to alice comes before the next to bob).
            events = c.events(**filters, type="effect")
            got: list[str] = []
            reader = asyncio.ensure_future(_scopes_of(events, 2, got))
            for _ in range(200):
                await c.write("alice", "a.txt", b"a")
                await c.write("bob", "b.txt", b"b")
                if reader.done():
                    break
            assert reader.done(), f"events({filters}) saw {got} of 200 writes to each"
            reader.result()
            assert got == ["bob", "bob"], filters
            await events.aclose()


@pytest.mark.slow
def test_errors_speak_the_command_lines_language(tmp_path: Path) -> None:
    """serve on an empty state without --repo names --repo, not a Python parameter."""
    proc = subprocess.run([*CORRAL, "serve", "--state", str(tmp_path / "empty"), "--port", "0",
                           "--backend", "copy"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "CORRAL_ADMIN_TOKEN": "a.x"})
    message = " ".join(proc.stderr.split())
    assert proc.returncode == 1, proc.stderr
    assert "--repo on the command line" in message and "Traceback" not in proc.stderr


def test_an_error_is_one_line_as_written_however_long_its_path(tmp_path: Path) -> None:
    """An error naming a long path is one line (not broken at the console's 80
    columns, so a log greps), and brackets in it are text, not console markup."""
    state = tmp_path / ("[bold]not-markup" + "-x" * 60)
    done = subprocess.run([*CORRAL, "trace", "log", "--state", str(state)],
                          capture_output=True, text=True, env={**os.environ, "COLUMNS": "80"})
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"error: {state} is not a Corral state directory (no trace.git)\n" in done.stderr
