"""The dashboard in a real browser (Playwright driving Debian's chromium) against a real
server that went through a scripted two-agent run (`scripted_run`): a block, a rewind, a
merge conflict and a gate hold.

Screenshots of each view go to tests/artifacts/dashboard/ (ignored by git; or
$CORRAL_ARTIFACTS) so a person can look at what the tests saw.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest

from coordinator.server._dashboard import graph_of

from .scripted_run import Run, scripted_run
from .server_fixtures import ADMIN

pytestmark = pytest.mark.slow  # a browser

CHROMIUM = os.environ.get("CORRAL_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(os.environ.get("CORRAL_ARTIFACTS")
                 or Path(__file__).resolve().parents[1] / "artifacts" / "dashboard")

playwright = pytest.importorskip("playwright.async_api", reason="playwright is not installed")
if not Path(CHROMIUM).exists():
    pytest.skip(f"no chromium at {CHROMIUM} (apt-get install chromium)", allow_module_level=True)


async def _shot(page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    await page.screenshot(path=str(path), full_page=True)
    return path


@asynccontextmanager
async def browser_page(width: int = 1400, height: int = 1000) -> AsyncIterator[object]:
    async with playwright.async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = await browser.new_page(viewport={"width": width, "height": height})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.errors = errors  # type: ignore[attr-defined]
            yield page
            assert errors == [], f"uncaught errors in the page: {errors}"
        finally:
            await browser.close()


async def _login(page, url: str, hash_: str = "") -> None:
    await page.goto(url + "/" + hash_)
    await page.fill("#token", ADMIN)
    await page.click("form#login button")
    await page.wait_for_selector("#app", state="visible")
    await page.wait_for_selector("#status:text-matches('^live')")


@pytest.fixture
async def run(tmp_path, sample_repo) -> AsyncIterator[Run]:
    async with scripted_run(tmp_path / "state", sample_repo) as r:
        yield r


async def test_login_form_hides_and_the_graph_shows_every_branch(run: Run):
    """After connecting, the token form is gone; the graph has a lane per live scope,
    a dot per effect (blocked ones ringed), fork and merge edges; ticking "archived
    branches" adds the discarded scope and bob's rewound head."""
    async with browser_page() as page:
        await page.goto(run.srv.url + "/")
        assert await page.is_visible("form#login")
        await _login(page, run.srv.url)
        assert not await page.is_visible("form#login")
        await page.wait_for_selector(".grow")
        lanes = await page.eval_on_selector_all(".chip.lane", "els => els.map(e => e.textContent)")
        assert lanes == ["root", "alice", "bob"]
        ids = await page.eval_on_selector_all(".grow.effect", "els => els.map(e => e.dataset.id)")
        for effect in ("alice#1", "alice#2", "bob#1", "bob#2", "bob#5", "root#0", "root#1"):
            assert effect in ids
        assert "bob#3" not in ids  # rewound away: only on the archived branch
        assert await page.locator("circle.node").count() == len(ids) + 1  # + the snapshot
        assert await page.locator("path.merge-edge").count() >= 1
        assert await page.locator("path.fork-edge").count() >= 2
        blocked = page.locator(f"circle[data-commit='{run.commits['bob_blocked']}']")
        assert await blocked.get_attribute("stroke") == "#b91c1c"
        await _shot(page, "graph")

        await page.check("#f-archived")
        await page.wait_for_selector(".chip.lane.gone")
        lanes = await page.eval_on_selector_all(".chip.lane", "els => els.map(e => e.textContent)")
        assert lanes == ["root", "alice", "bob", "bob (rewound)", "docs (discarded)"]
        ids = await page.eval_on_selector_all(".grow.effect", "els => els.map(e => e.dataset.id)")
        assert {"bob#3", "bob#4", "docs#1", "docs#3"} <= set(ids)
        await page.click(f".grow[data-commit='{run.commits['bob_blocked']}']")
        await page.wait_for_selector("#detail-body .reason")
        await _shot(page, "graph-archived")  # (the README's picture)


async def test_clicking_effects_shows_diff_output_model_call_and_cause(run: Run):
    """An fs.write shows its diff; the failed command its exit code and output; the
    model call its request, response and tokens; the blocked write its reason and the
    change it asked for; the rewind its cause, the supervisor's decision."""
    async with browser_page() as page:
        await _login(page, run.srv.url)
        await page.click(f".grow[data-commit='{run.commits['alice_write']}']")
        await page.wait_for_selector("#detail-body .diff")
        diff = await page.inner_text("#detail-body .diff")
        assert "-line 10" in diff and "+line 10 by alice" in diff
        assert page.url.endswith("#effect=" + run.commits["alice_write"])
        await _shot(page, "effect-write")

        await page.click(f".grow[data-commit='{run.commits['model_call']}']")
        await page.wait_for_selector("#detail-body .model-response")
        text = await page.inner_text("#detail-body")
        assert "Change line 10 of src/app.py." in await page.inner_text(".model-request")
        assert "I changed line 10 of src/app.py." in await page.inner_text(".model-response")
        assert "openai/m" in text and "prompt" in text and "completion" in text
        await _shot(page, "effect-model-call")

        await page.click(f".grow[data-commit='{run.commits['bob_blocked']}']")
        await page.wait_for_selector("#detail-body .reason")
        assert "conflict with changes by scope alice" in await page.inner_text(".reason")
        assert "+line 10 by bob" in await page.inner_text("#detail-body .diff")
        await _shot(page, "effect-blocked")

        await page.check("#f-archived")
        await page.wait_for_selector(f".grow[data-commit='{run.commits['bob_exec']}']")
        await page.click(f".grow[data-commit='{run.commits['bob_exec']}']")
        await page.wait_for_selector("#detail-body .stdout")
        assert "FAILED test_power" in await page.inner_text(".stdout")
        assert "exit code\n3" in await page.inner_text("#detail-body")
        await _shot(page, "effect-exec")

        await page.click(f".grow[data-commit='{run.commits['bob_rewind']}']")
        await page.wait_for_selector("#detail-body h3:has-text('Cause chain')")
        assert "bob#4 decision rewind bob" in await page.inner_text("#detail-body")


async def test_deep_link_opens_the_effect_and_filters_dim_the_rest(run: Run):
    """A URL with #effect=<commit> opens that effect after login; the kind filter and
    the path search dim what does not match and count what does."""
    async with browser_page() as page:
        await _login(page, run.srv.url, "#effect=" + run.commits["bob_pow"])
        await page.wait_for_selector("#detail-body .diff")
        assert "+def power(a, b):" in await page.inner_text("#detail-body .diff")
        await page.select_option("#f-kind", "model.call")
        assert await page.locator(".grow.effect:not(.dim)").count() == 1
        await page.select_option("#f-kind", "")
        await page.fill("#f-path", "README")
        undimmed = await page.eval_on_selector_all(".grow.effect:not(.dim)",
                                                   "els => els.map(e => e.dataset.id)")
        assert sorted(undimmed) == ["bob#6", "root#0"]
        assert "2 of" in await page.inner_text("#f-count")
        await page.fill("#f-path", "")
        await page.select_option("#f-verdict", "block")
        undimmed = await page.eval_on_selector_all(".grow.effect:not(.dim)",
                                                   "els => els.map(e => e.dataset.id)")
        assert undimmed == ["bob#1"]
        await page.goto(run.srv.url + "/#scope=alice")
        await page.wait_for_selector("#detail-body .scope")
        assert "model calls\n1" in await page.inner_text("#detail-body .kv")
        await _shot(page, "scope-alice")


async def test_gate_shows_the_intent_diff_and_approving_releases_the_agent(run: Run):
    """The held write is shown with the diff it would make; approving from the page
    lets bob's write land, with the approval in its decision."""
    async with browser_page() as page:
        await _login(page, run.srv.url)
        await page.wait_for_selector(".held .diff")
        assert "+notes from bob" in await page.inner_text(".held .diff")
        assert not run.held.done()
        await _shot(page, "gate")
        await page.fill(".held input", "fine by me")
        await page.click(".held button:has-text('approve')")
        r = await run.held
        assert r.ok and "approved at the gate (fs.write:held/*): fine by me" in r.reason
        await page.wait_for_selector("#gate-empty", state="visible")


async def test_merge_preview_shows_conflict_hunks_with_who_wrote_each_side(run: Run):
    """A dry run of bob into root lists README.md's conflict hunk by hunk, with the
    effect that wrote ours (docs) and theirs (bob); nothing is written."""
    async with browser_page() as page:
        await _login(page, run.srv.url)
        before = run.srv.hub.coordinator.scopes["root"].head
        await page.select_option("#m-into", "root")
        await page.select_option("#m-other", "bob")
        await page.click("#m-preview")
        await page.wait_for_selector(".conflict a:has-text('docs#1')")
        text = await page.inner_text("#merge-out")
        assert "README.md — content" in text
        assert "# sample, documented by docs" in text and "# sample, as bob sees it" in text
        assert "docs#1 fs.write README.md" in text and "bob#6 fs.write README.md" in text
        assert run.srv.hub.coordinator.scopes["root"].head == before
        assert page.url.endswith("#merge=root..bob")
        await _shot(page, "merge-preview")


async def test_action_buttons_call_the_api_and_show_the_recorded_decision(run: Run):
    """inject, rewind to here, fork, hand off, merge and discard from the page: each
    lands in the trace and the page shows the decision it recorded."""
    c = run.srv.client
    async with browser_page() as page:
        await _login(page, run.srv.url, "#scope=alice")
        await page.wait_for_selector("#detail-body .scope-actions")
        inject = page.locator(".scope-actions .actions", has_text="inject note")
        await inject.locator("input").fill("look at line 10 again")
        await inject.locator("button").click()
        answer = page.locator(".action-answer", has_text="inject note")
        await answer.wait_for()
        assert "decision allow" in await answer.inner_text()
        alice = srv_scope(run, "alice")
        assert [m.text for m in alice.inbox] == ["look at line 10 again"]

        # rewind alice to her first write, from that effect's page
        await page.click(f".grow[data-commit='{run.commits['alice_write']}']")
        await page.click("#detail-body button:has-text('rewind to here')")
        answer = page.locator(".action-answer", has_text="rewind to here")
        await answer.wait_for()
        text = await answer.inner_text()
        assert "scope.rewind" in text and "the recorded supervisor decision" in text
        assert alice.head != run.commits["alice_write"]
        log = (await c.log("alice")).entries
        assert log[-2].commit == run.commits["alice_write"]
        assert log[-1].effect.kind == "scope.rewind"
        # its cause is the supervisor's decision, rewound past with the rest (archived)
        decisions = {n.id: n for n in graph_of(run.srv.hub.coordinator.trace, archived=True).nodes
                     if n.kind == "decision"}
        assert log[-1].effect.cause in decisions

        # fork alice into alice-2, at her head
        await page.goto(run.srv.url + "/#scope=alice")
        await page.wait_for_selector("#detail-body .scope-actions")
        fork = page.locator(".scope-actions .actions", has_text="fork")
        await fork.first.locator("input").fill("alice-2")
        await fork.first.locator("button").click()
        await page.wait_for_selector(".action-answer:has-text('forked alice-2')")
        assert "alice-2" in run.srv.hub.coordinator.scopes

        # alice-2 takes over bob's work (handoff), then merges into alice, then is discarded
        await page.goto(run.srv.url + "/#scope=alice-2")
        await page.wait_for_selector("#detail-body .scope-actions")
        hand = page.locator(".scope-actions .actions", has_text="hand off from")
        await hand.locator("select").select_option("bob")
        await hand.locator("button").click()
        await page.locator(".action-answer", has_text="hand off from").wait_for()
        kinds = [e.effect.kind for e in (await c.log("alice-2")).entries]
        assert kinds[-2:] == ["decision", "scope.merge"]

        merge = page.locator(".scope-actions .actions", has_text="merge into").first
        await merge.locator("select").select_option("alice")
        await merge.locator("button").click()
        await page.locator(".action-answer", has_text="merge into").wait_for()
        assert "Merged." in await page.locator(".action-answer").first.inner_text()
        assert (await c.log("alice")).entries[-1].effect.kind == "scope.merge"
        await _shot(page, "actions")

        discard = page.locator(".scope-actions .actions", has_text="discard")
        await discard.locator("button").click()
        await page.wait_for_selector("#detail-title:has-text('Scope alice-2 is gone')")
        # a discarded scope leaves the registry (its branch stays archived)
        assert "alice-2" not in run.srv.hub.coordinator.scopes
        assert run.srv.hub.coordinator.last_discard("alice-2") is not None
        lanes = await page.eval_on_selector_all(".chip.lane", "els => els.map(e => e.textContent)")
        assert "alice-2" not in lanes


async def test_fork_from_an_older_effect_starts_the_child_at_that_commit(run: Run):
    """"fork from here" on an effect below the branch's head forks at that effect's
    commit: the child's head tree is that commit's tree, not the head's."""
    async with browser_page() as page:
        old = run.commits["alice_write"]
        await _login(page, run.srv.url, "#effect=" + old)
        fork = page.locator("#detail-body .actions", has_text="fork from here")
        await fork.locator("input").fill("alice-then")
        await fork.locator("button").click()
        await page.wait_for_selector(".action-answer:has-text('forked alice-then')")
        child = srv_scope(run, "alice-then")
        assert child.parent == "alice"
        trace = run.srv.hub.coordinator.trace
        assert srv_scope(run, "alice").head != old
        assert trace.commit(child.head).tree_id == trace.commit(old).tree_id
        assert trace.commit(child.head).parents[0].id == trace.commit(old).id
        await _shot(page, "fork-from-here")


async def test_the_live_stream_opens_with_the_recorded_effects_then_goes_on_live(run: Run):
    """A page opened after the run is not blank: the stream holds the live branches'
    recorded effects, newest first, marked as recorded; a new effect then arrives
    on top as a live event, and no effect is listed twice."""
    trace = run.srv.hub.coordinator.trace
    ids = {n.commit: n.id for n in graph_of(trace).nodes}
    async with browser_page() as page:
        await _login(page, run.srv.url)
        await page.wait_for_selector("#stream tr.recorded")
        info = await page.inner_text("#stream-info")
        assert "recorded before this page opened" in info
        rows = await page.eval_on_selector_all(
            "#stream tr", "rs => rs.map(r => r.cells[1].textContent)")
        for name in ("alice_write", "model_call", "bob_pow", "root_merge", "bob_readme"):
            assert ids[run.commits[name]] in rows, name
        newest, older = ids[run.commits["root_merge"]], ids[run.commits["alice_write"]]
        assert rows.index(newest) < rows.index(older)
        assert len(rows) == len(set(rows))
        # a recorded row opens its effect like a live one
        await page.click(f"#stream tr >> text='{ids[run.commits['bob_pow']]}'")
        await page.wait_for_selector("#detail-body .diff:has-text('src/pow.py')")
        await _shot(page, "stream-on-load")

        r = await run.srv.client.inject("alice", "a live note")
        await page.wait_for_selector(f"#stream tr:not(.recorded) >> text='{r.effect.id}'")
        first = await page.eval_on_selector("#stream tr", "r => r.cells[1].textContent")
        assert first == r.effect.id


async def test_scope_page_shows_a_timeline_with_times_waits_and_durations(run: Run):
    """The scope page lists its effects oldest first with the wall-clock time each
    was recorded (its commit's time, UTC), the wait since the previous one, and a
    command's duration as a bar."""
    c = run.srv.client
    x = await c.exec("alice", ["sh", "-c", "sleep 1.2"])
    assert x.ok and x.commit
    trace = run.srv.hub.coordinator.trace
    async with browser_page() as page:
        await _login(page, run.srv.url, "#scope=alice")
        row = page.locator(f".timeline tr[data-commit='{x.commit}']")
        await row.wait_for()
        cells = await row.locator("td").all_inner_texts()
        when = datetime.fromtimestamp(trace.commit(x.commit).commit_time, UTC)
        assert cells[0] == when.strftime("%H:%M:%S")
        assert "exec" in cells[1] and cells[2].startswith("+")
        took = float(cells[3].split()[0])
        assert 1.2 <= took < 5
        assert await row.locator(".bar.run").evaluate("b => b.offsetWidth") > 0
        commits = await page.eval_on_selector_all(
            ".timeline tbody tr", "rs => rs.map(r => r.dataset.commit)")
        log = [e.commit for e in (await c.log("alice")).entries if e.effect]
        assert commits == log  # oldest first, every effect of the branch
        heading = await page.inner_text(".timeline h3")
        assert heading.startswith(f"Timeline ({len(log)} effects over")
        await page.locator(".timeline").scroll_into_view_if_needed()
        await _shot(page, "timeline")


def srv_scope(run: Run, name: str):
    return run.srv.hub.coordinator.scopes[name]


async def test_api_errors_show_the_servers_detail(run: Run):
    """A refused action shows the server's `detail` (not "undefined"), and the page
    keeps working: no uncaught error."""
    async with browser_page() as page:
        await _login(page, run.srv.url, "#scope=alice")
        await page.wait_for_selector("#detail-body .scope-actions")
        fork = page.locator(".scope-actions .actions", has_text="fork").first
        await fork.locator("input").fill("bob")  # taken
        await fork.locator("button").click()
        await page.wait_for_selector("#notice", state="visible")
        assert await page.inner_text("#notice") == "scope 'bob' already exists (409)"


async def test_narrow_window_has_no_horizontal_scroll(run: Run):
    """At 420 px wide the page is one column and nothing overflows sideways."""
    async with browser_page(width=420, height=900) as page:
        await _login(page, run.srv.url, "#effect=" + run.commits["alice_write"])
        await page.wait_for_selector("#detail-body .diff")
        overflow = await page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 0
        await _shot(page, "narrow")


async def test_a_cut_is_marked_across_the_lanes_and_the_team_forks_and_rewinds_from_it(run: Run):
    """"mark a cut" records the whole team at one moment and draws it across the lanes
    (a mark on each member's head); the cut's page lists the members, and "rewind the
    team" / "fork the team" act on all of them together."""
    c = run.srv.client
    [held] = await c.gate_pending()
    await c.approve(held.id, "for the cut")  # a member waiting at the gate cannot be rewound
    await run.held
    coord = run.srv.hub.coordinator
    async with browser_page() as page:
        await _login(page, run.srv.url)
        mark = page.locator("#cut-new .actions")
        await mark.locator("input").fill("before")
        await mark.locator("button").click()
        await page.wait_for_selector(".action-answer:has-text('marked cut before of 3 scopes')")
        await page.wait_for_selector(".chip.cut[data-cut='before']")
        marks = await page.eval_on_selector_all(
            "rect.cut-mark[data-cut='before']", "els => els.map(e => e.dataset.scope)")
        assert sorted(marks) == ["alice", "bob", "root"]
        assert await page.locator("polyline.cut-line[data-cut='before']").count() == 1
        cut = await coord.read_cut("before")
        heads = {m.scope: m.head for m in cut.members}
        for scope, head in heads.items():  # each mark sits on that member's head dot
            dot = await page.locator(f"circle.node[data-commit='{head}']").bounding_box()
            at = await page.locator(f"rect.cut-mark[data-scope='{scope}']").bounding_box()
            assert abs((dot["y"] + dot["height"] / 2) - (at["y"] + at["height"] / 2)) < 1
        await _shot(page, "cut")

        await c.write("alice", "after-the-cut.txt", b"later\n")
        await c.write("bob", "bob-after.txt", b"later too\n")
        await page.click(".chip.cut[data-cut='before']")
        await page.wait_for_selector("#detail-body table.members")
        rows = await page.eval_on_selector_all("table.members tr[data-scope]",
                                               "els => els.map(e => e.dataset.scope)")
        assert rows == ["alice", "bob", "root"]
        assert "refs/corral/cuts/before" in await page.inner_text("#detail-body")

        rewind = page.locator("#detail-body .actions", has_text="rewind the team")
        await rewind.locator("input").fill("try again from the cut")
        await rewind.locator("button").click()
        answer = page.locator(".action-answer", has_text="rewound the team")
        await answer.wait_for()
        decisions = await answer.inner_text()
        assert srv_scope(run, "alice").head != heads["alice"]  # the rewind is an effect on top
        for scope in ("alice", "bob"):
            s = srv_scope(run, scope)
            assert coord.trace.commit(s.head).tree_id == coord.trace.commit(heads[scope]).tree_id
            log = (await c.log(scope)).entries
            assert log[-1].effect.kind == "scope.rewind"
            assert log[-1].effect.cause in decisions  # one decision per member, shown

        fork = page.locator("#detail-body .actions", has_text="fork the team")
        await fork.locator("input").fill("again-")
        await fork.locator("button").click()
        await page.wait_for_selector(".action-answer:has-text('forked the team')")
        for scope in ("alice", "bob", "root"):
            child = srv_scope(run, "again-" + scope)
            assert child.parent == scope
            tree = coord.trace.commit(heads[scope]).tree_id
            assert coord.trace.commit(child.head).tree_id == tree

        await page.goto(run.srv.url + "/#cut=nope")
        await page.wait_for_selector("#notice", state="visible")
        assert "no cut named 'nope'" in await page.inner_text("#notice")
