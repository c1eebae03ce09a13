"""The read-only views the dashboard uses (/v1/graph, diffs, proposed changes, scope
overviews), over HTTP against a real server after a scripted run; and the token
metric counted from recorded model calls."""

from __future__ import annotations

import re

import aiohttp
import pytest

from .scripted_run import scripted_run
from .server_fixtures import ADMIN

H = {"Authorization": f"Bearer {ADMIN}"}


async def _get(http: aiohttp.ClientSession, url: str, headers=H) -> tuple[int, dict]:
    async with http.get(url, headers=headers) as r:
        return r.status, await r.json()


@pytest.mark.slow
async def test_views_over_http(tmp_path, sample_repo):
    """The graph has a lane per live scope (plus archives when asked) and every parent
    drawn before its children; a commit's diff and a held write's proposed diff are
    unified diffs; a scope's overview counts its effects, blocks and tokens; all four
    routes are in /openapi.json; the graph needs the admin token."""
    async with scripted_run(tmp_path / "s", sample_repo) as run, \
            aiohttp.ClientSession() as http:
        url = run.srv.url
        status, g = await _get(http, url + "/v1/graph")
        assert status == 200
        assert [lane["name"] for lane in g["lanes"]] == ["root", "alice", "bob"]
        seen: set[str] = set()
        for node in g["nodes"]:
            assert all(p not in {n["commit"] for n in g["nodes"]} or p in seen
                       for p in node["parents"])
            seen.add(node["commit"])
        _, ga = await _get(http, url + "/v1/graph?archived=true")
        states = {(lane["name"], lane["state"]) for lane in ga["lanes"]}
        assert {("bob", "rewound"), ("docs", "discarded")} <= states
        # within a scope, seq order is kept even across a rewound branch
        bob = [n["seq"] for n in ga["nodes"] if n["id"].startswith("bob#")]
        assert bob == sorted(bob)

        _, small = await _get(http, url + "/v1/graph?limit=2")
        bob_lane = next(lane for lane in small["lanes"] if lane["name"] == "bob")
        assert bob_lane["shown"] == 2 and bob_lane["more"]

        _, d = await _get(http, url + f"/v1/trace/{run.commits['alice_write']}/diff")
        [f] = d["files"]
        assert f["path"] == "src/app.py" and f["status"] == "modified"
        assert "+line 10 by alice" in f["patch"] and (f["additions"], f["deletions"]) == (1, 1)

        [held] = (await run.srv.client.gate_pending())
        intent = held.effect.intent
        q = f"?path={intent.path}&blob={intent.blob}"  # type: ignore[union-attr]
        _, p = await _get(http, url + f"/v1/trace/{held.effect.parent}/proposed{q}")
        assert p["files"][0]["status"] == "added"
        assert "+notes from bob" in p["files"][0]["patch"]

        _, o = await _get(http, url + "/v1/scopes/alice/overview")
        assert o["effects"] == 3 and o["blocked"] == 0
        assert o["tokens"]["calls"] == 1 and o["tokens"]["prompt"] > 0
        _, ob = await _get(http, url + "/v1/scopes/bob/overview")
        assert ob["blocked"] == 1 and ob["tokens"]["calls"] == 0

        for bad in ("x%00y", "/etc/passwd", "../x"):
            status, err = await _get(http, url + f"/v1/trace/{held.effect.parent}/proposed"
                                     f"?path={bad}")
            assert status == 400 and err["error"] == "BadRequest", bad
        status, _ = await _get(http, url + "/v1/graph", headers={})
        assert status == 401
        status, err = await _get(http, url + "/v1/graph?limit=0")
        assert status == 400 and "limit" in err["detail"]
        _, doc = await _get(http, url + "/openapi.json")
        for path in ("/v1/graph", "/v1/trace/{commit}/diff", "/v1/trace/{commit}/proposed",
                     "/v1/scopes/{name}/overview"):
            assert "get" in doc["paths"][path], path


@pytest.mark.slow
async def test_model_tokens_metric_counts_recorded_model_calls(tmp_path, sample_repo):
    """corral_model_tokens_total comes from the recorded model.call effect (the scripted
    run's call goes through ModelCaller on the server's coordinator), once each."""
    async with scripted_run(tmp_path / "s", sample_repo) as run:
        usage = next(e.effect.outcome.usage for e in (await run.srv.client.log("alice")).entries
                     if e.effect and e.effect.kind == "model.call")  # type: ignore[union-attr]
        text = await run.srv.client.metrics()
    prompt = re.search(r'^corral_model_tokens_total\{type="prompt"\} (\S+)$', text, re.M)
    completion = re.search(r'^corral_model_tokens_total\{type="completion"\} (\S+)$', text,
                           re.M)
    assert prompt and float(prompt.group(1)) == usage.prompt_tokens > 0
    assert completion and float(completion.group(1)) == usage.completion_tokens > 0


async def test_model_tokens_metric_counts_calls_recorded_by_anyone(tmp_path, sample_repo):
    """A model.call recorded straight through `Scope.perform` (as an external agent's
    recorder does, without ModelCaller) is counted too; a replayed one is not."""
    from coordinator import ModelCall, ModelOutcome, Usage

    from .server_fixtures import serve

    async with serve(tmp_path / "s", sample_repo) as srv:
        coord = srv.hub.coordinator
        scope = await coord.root.fork("ext")
        request = await coord.io(coord.trace.write_blob, b'{"model":"x"}')
        response = await coord.io(coord.trace.write_blob, b'{"text":"ok"}')

        def recorded(replayed: bool) -> ModelOutcome:
            return ModelOutcome(response=response, replayed=replayed,
                                usage=Usage(prompt_tokens=30, cached_prompt_tokens=20,
                                            completion_tokens=5))

        intent = ModelCall(provider="external", model="x", request=request)
        assert (await scope.record(intent, recorded(False))).ok
        assert (await scope.record(intent, recorded(True))).ok
        text = await srv.client.metrics()
    assert 'corral_model_tokens_total{type="prompt"} 30.0' in text
    assert 'corral_model_tokens_total{type="cached"} 20.0' in text
    assert 'corral_model_tokens_total{type="completion"} 5.0' in text
