"""Rollout trees grown on Ray (agents/rollouts/_ray.py) against a local Ray cluster this
module starts: the tree equals the one `LocalExecutor` grows from the same run and seeds,
and a worker killed mid-sibling is retried without losing a finished leaf."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from agents.model_server import ScriptedModelServer  # noqa: E402
from agents.rollouts import SiblingJob, TreeRecord, fork_points, grow, siblings  # noqa: E402
from agents.rollouts.on_ray import RayExecutor, connect  # noqa: E402
from coordinator import Coordinator  # noqa: E402
from sandboxes._mount import mounts_under  # noqa: E402
from tests.agents._rollouts_run import TEST, record_run, scripts  # noqa: E402

RAY = Path(sys.executable).parent / "ray"

_COMMIT = re.compile(r"^[0-9a-f]{40}$")


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    # the kill hook lives in this module, which Ray's workers cannot import wherever
    # pytest was started from (they do not get its sys.path): ship it by value
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    connect(num_cpus=2)
    yield
    ray.shutdown()


def _kill_once(marker: str, job: SiblingJob, point: str) -> None:
    """Kill this worker process (SIGKILL) in sibling 1 of f1 after it is graded, once."""
    if job.fork.id == "f1" and job.sibling == 1 and point == "graded":
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            return
        os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)


async def _grow(state: Path, base_url: str, hook: Any = None) -> tuple[TreeRecord, Any]:
    async with Coordinator.open(state) as coord:
        heads = {m: coord.scope(m).head for m in ("agent-1", "agent-2")}
        points = await coord.io(lambda: fork_points(coord.trace, heads, interventions=True))
        run = (None if hook == "local" else
               lambda g: RayExecutor(g, base_url=base_url, hook=hook))
        tree = await grow(coord, list(heads), points, siblings(4, seed=0), test=TEST,
                          base_url=base_url, tree_id="rt-test", max_steps=12, executor=run)
        live = {s.name for s in coord.scopes.live()}
        return _normal(coord, tree), live


def _normal(coord: Coordinator, tree: TreeRecord) -> Any:
    """The record with each commit replaced by its tree: commits hold times, trees not."""
    def walk(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v) for v in x]
        if isinstance(x, str) and _COMMIT.match(x):
            return "tree:" + str(coord.trace.commit(x).tree_id)
        return x
    return walk(tree.model_dump(mode="json"))


@pytest.fixture(scope="module")
def grown(tmp_path_factory: pytest.TempPathFactory, cluster: None) -> Iterator[Any]:
    tmp = tmp_path_factory.mktemp("ray")

    async def go() -> dict[str, Any]:
        async with ScriptedModelServer() as server:
            for model, script in scripts().items():
                server.script(model, script)
            state = await record_run(tmp, server.base_url)
            for name in ("ray", "killed"):
                shutil.copytree(state, tmp / name, ignore=shutil.ignore_patterns("lock", "ws"))
            return {
                "local": await _grow(state, server.base_url, "local"),
                "ray": await _grow(tmp / "ray", server.base_url),
                "killed": await _grow(tmp / "killed", server.base_url, functools.partial(
                    _kill_once, str(tmp / "killed.marker"))),
                "marker": (tmp / "killed.marker").exists(), "tmp": tmp}

    yield asyncio.run(go())


@pytest.mark.slow
def test_a_tree_grown_on_ray_equals_the_local_one(grown: dict[str, Any]) -> None:
    local, live_local = grown["local"]
    on_ray, live_ray = grown["ray"]
    assert len(local["leaves"]) == 8 and {x["status"] for x in local["leaves"]} == {"graded"}
    assert {x["grade"]["reward"] for x in local["leaves"]} == {0.0, 1.0}
    assert on_ray == local
    assert live_ray == live_local  # every leaf's scopes (and grading scope) live on the driver


@pytest.mark.slow
def test_the_adopted_leaves_reopen_from_the_drivers_trace(grown: dict[str, Any]) -> None:
    async def heads() -> dict[str, str]:
        async with Coordinator.open(grown["tmp"] / "ray") as coord:
            return {s.name: coord.trace.commit(s.head).message for s in coord.scopes.live()
                    if s.name.startswith("rt-test.f1s")}
    found = asyncio.run(heads())
    assert {n.rsplit(".", 1)[-1] for n in found} == {"agent-1", "agent-2", "grade"}
    assert len(found) == 12


@pytest.mark.slow
def test_a_worker_killed_mid_sibling_is_retried_and_no_leaf_is_lost(
        grown: dict[str, Any]) -> None:
    assert grown["marker"]  # the worker was killed once, in f1s1, after grading
    killed, live = grown["killed"]
    assert killed == grown["local"][0]
    assert live == grown["local"][1]
    # the retry cleared the killed attempt's work directory and the mounts in it
    tmp = Path(tempfile.gettempdir())
    assert [p for p in mounts_under(tmp) if "corral-ray" in str(p)] == []
    assert not list(tmp.glob("corral-ray-sibling-*")) + list(tmp.glob("corral-ray/sibling-*"))


def test_an_unknown_executor_is_refused(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from coordinator.cli import app

    done = CliRunner().invoke(app, ["rollouts", "grow", "--state", str(tmp_path / "s"),
                                    "--every", "1", "--executor", "dask"])
    assert done.exit_code == 1 and "unknown executor 'dask'" in done.output


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_the_cli_grows_on_a_cluster_at_an_address(
        tmp_path: Path, served: Callable[[dict[str, Any]], str]) -> None:
    """`corral rollouts grow --executor ray --address` joins a cluster started apart
    (`ray start --head` on 127.0.0.1), its leaves graded and kept in the state."""
    url = served(scripts())
    state = asyncio.run(record_run(tmp_path, url))
    port = _free_port()
    temp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # its sockets' paths must be short
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", os.getcwd()),
           "RAY_AUTH_MODE": "disabled"}
    head = subprocess.Popen(
        [str(RAY), "start", "--head", "--block", "--node-ip-address=127.0.0.1",
         f"--port={port}", "--num-cpus=2", "--include-dashboard=false",
         f"--temp-dir={temp}"], env=env, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "coordinator.cli", "rollouts", "grow", "--state",
             str(state), "--interventions", "-k", "2", "--test", TEST, "--base-url", url,
             "--tree", "rt-addr", "--executor", "ray", "--address", f"127.0.0.1:{port}",
             "--json"], env=env, capture_output=True, text=True, timeout=300)
    finally:
        os.killpg(head.pid, signal.SIGTERM)  # the head's group: this test started it
        try:
            head.wait(10)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGKILL)  # what SIGTERM left (the GCS server)
        head.wait(10)
        shutil.rmtree(temp, ignore_errors=True)
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert len(record["leaves"]) == 2 * len(record["forks"]) > 0
    assert {leaf["status"] for leaf in record["leaves"]} == {"graded"}
    listed = subprocess.run([sys.executable, "-m", "coordinator.cli", "rollouts", "list",
                             "--state", str(state)], env=env, capture_output=True, text=True)
    assert listed.stdout.startswith("rt-addr\t")
