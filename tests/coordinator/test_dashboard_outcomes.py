"""What the dashboard says about outcomes, in a real browser (Playwright driving Debian's
chromium) against the scripted two-agent run of `scripted_run`: a command that failed is
drawn as a failure, and an answered gate item leaves no live buttons behind."""

from __future__ import annotations

import pytest

from .scripted_run import Run
from .test_dashboard_browser import _login, _shot, browser_page
from .test_dashboard_browser import run as run  # the fixture

pytestmark = pytest.mark.slow  # a browser

RED = "rgb(185, 28, 28)"  # --bad
GREEN = "rgb(21, 128, 61)"  # --ok


async def _color(page, selector: str) -> str:
    return await page.eval_on_selector(selector, "e => getComputedStyle(e).color")


async def test_a_command_that_exited_non_zero_is_drawn_red_not_green(run: Run):
    """A command that exits 1 is a recorded effect (status materialized) that failed: its
    row in the live stream, its ring and row in the graph, its status and its exit code
    are drawn as a failure; a command that exits 0 stays green in the stream."""
    async with browser_page() as page:
        await _login(page, run.srv.url)
        ok = await run.srv.client.exec("alice", ["sh", "-c", "true"])
        bad = await run.srv.client.exec("alice", ["sh", "-c", "echo no; exit 1"])
        assert ok.returncode == 0 and bad.ok and bad.returncode == 1
        for result, color in ((bad, RED), (ok, GREEN)):
            cell = f"#stream tr:has(td a:text-is('{result.effect.id}')) td:nth-child(3)"
            await page.wait_for_selector(cell)
            assert await _color(page, cell) == color, result.effect.id

        row = f".grow[data-commit='{bad.commit}']"
        await page.wait_for_selector(row)
        assert await _color(page, f"{row} span:not(.id)") == RED
        ring = page.locator(f"circle[data-commit='{bad.commit}']")
        assert await ring.get_attribute("stroke") == "#b91c1c"

        await page.click(row)
        await page.wait_for_selector("#detail-body .stdout")
        status = "#detail-body dt:text-is('status') + dd span"
        assert "failed" in await page.inner_text(status)
        assert await _color(page, status) == RED
        assert await _color(page, "#detail-body dt:text-is('exit code') + dd span") == RED
        await _shot(page, "effect-exec-failed")


async def test_after_approving_no_buttons_stay_beside_nothing_is_held(run: Run):
    """Approving the one held write takes its approve/reject buttons away with it: the
    page says "Nothing is held." with no button of the gate left, and the answer is
    shown below."""
    async with browser_page() as page:
        await _login(page, run.srv.url)
        await page.wait_for_selector(".held .diff")
        assert not await page.is_visible("#gate-empty")
        await page.click(".held button:has-text('approve')")
        assert (await run.held).ok
        await page.wait_for_selector("#gate-empty", state="visible")
        await page.wait_for_timeout(600)  # the refresh after the answer (300 ms)
        assert await page.is_visible("#gate-empty")
        assert await page.locator("#gate-box button").count() == 0
        assert await page.locator("#gate .held").count() == 0
        assert "approved:" in await page.inner_text("#gate-answered")
        await _shot(page, "gate-answered")
