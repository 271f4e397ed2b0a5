"""The Lesson tab in headless Chromium: trap env, tiny random policy, hash embedder, tmp sessions.

Plays the whole lesson with tiny settings (1 variation, 2 episodes, 1 distill step) and checks that
the three stage tables, the distill table and the success-rate chart appear; the screenshot goes to
test-artifacts/tab-lesson.png.
"""

from __future__ import annotations

import re

import pytest


pytestmark = pytest.mark.browser


@pytest.mark.timeout(300)
def test_play_the_lesson(page, studio_url, artifacts):
    page.goto(studio_url)
    page.get_by_role("tab", name="Lesson").click()
    # the page's load event pre-fills the curated tips
    page.wait_for_function("document.querySelector('#ls-tip-0 textarea').value.startsWith('The ')")
    page.locator("#ls-variations .token", has_text=re.compile(r"^\s*1\s*$")).locator(".token-remove").click()
    page.locator("#ls-tip-1").wait_for(state="hidden")
    page.locator("#ls-episodes input").fill("2")
    page.locator("#ls-distill-steps input").fill("5")
    assert "Expected time" in page.locator("#ls-session").inner_text()
    tip = page.locator("#ls-tip-0 textarea")
    tip.fill("EDITED: " + tip.input_value())
    page.locator("#ls-play").click()
    try:
        page.locator("#ls-status").get_by_text(re.compile(r"\[done\]")).wait_for(timeout=120_000)
    finally:
        page.screenshot(path=str(artifacts / "tab-lesson.png"), full_page=True)
    # one row per table: variation 0 and its success rate in % (the grid keeps a hidden sizing copy of
    # each row: take the visible match)
    for stage in ("naive", "memory", "naive_again"):
        page.locator(f"#ls-table-{stage}").get_by_text(re.compile(r"^\d+%$")).filter(visible=True).first.wait_for(timeout=30_000)
    page.locator("#ls-table-distill").get_by_text(re.compile(r"^(yes|no)$")).filter(visible=True).first.wait_for(timeout=30_000)
    page.locator("#ls-chart .barlayer .point").first.wait_for(timeout=30_000)
    assert page.locator("#ls-chart .barlayer .point").count() == 3
    # every bar is drawn, a 0 % one too (issue 50: a bar of height 0 left only its label)
    heights = page.evaluate("() => [...document.querySelectorAll('#ls-chart .barlayer .point path')]"
                            ".map(p => p.getBBox().height)")
    assert len(heights) == 3 and min(heights) >= 4, heights
    assert "lesson-trap-light-bulb" in page.locator("#ls-session").inner_text()
    # every distill step shows, the fifth not clipped: the table needs no scrolling
    page.locator("#ls-table-distill").get_by_text(re.compile(r"^5$")).filter(visible=True).first.wait_for(timeout=30_000)
    page.wait_for_timeout(500)
    clipped = page.evaluate("""() => [...document.querySelectorAll('#ls-table-distill *')]
        .filter(e => e.scrollHeight > e.clientHeight + 2 && getComputedStyle(e).overflowY.match(/auto|scroll/))
        .map(e => e.className)""")
    assert clipped == []
    assert "measured on this machine" in page.locator("#ls-session").inner_text()
    assert "%" in page.locator("#ls-chart .ytick text").first.text_content()
    page.screenshot(path=str(artifacts / "tab-lesson.png"), full_page=True)


def _type_a_typo(page) -> None:
    """Type -1 as the step limit and wait for the expected-time line to refuse it. A fresh-clone CI run on a
    loaded machine (2026-12-07) waited 240 s for the error in vain; the likely cause, not confirmed, is the
    page load's own form (step limit 8) arriving after the typing and overwriting it, as it would for a
    user typing in the page's first seconds. So when the box no longer holds -1 the test types it again,
    as that user would; the waits add up to the 240 s the single wait had."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

    box = page.locator("#rc-step-limit input")
    error = page.locator("#rc-expected").get_by_text("step limit must be a whole number in 1…1000, got -1")
    for _ in range(6):
        if box.input_value() != "-1":
            box.fill("-1")
        try:
            error.wait_for(timeout=30_000)
            return
        except PlaywrightTimeoutError:
            continue
    error.wait_for(timeout=60_000)


@pytest.mark.timeout(600)
def test_race_draws_both_arms_their_evaluations_and_a_verdict(page, studio_url, artifacts):
    page.goto(studio_url)
    page.get_by_role("tab", name="Race (EMPO² vs GRPO)").click()
    # the open session plays the search family: the race defaults to the fixed family's class race
    page.wait_for_function("document.querySelector('#rc-group input').value === '8'")
    page.locator("#rc-expected").get_by_text(re.compile(r"Expected time")).wait_for()
    assert page.locator("#rc-target input:checked").input_value() == "trap"
    form = ("iterations", "eval-every", "seeds", "step-limit", "eval-repeats")
    assert [page.locator(f"#rc-{k} input").input_value() for k in form] == ["15", "15", "1", "8", "1"]
    class_time = page.locator("#rc-expected").inner_text()
    _type_a_typo(page)  # a typo the preset must undo (a new user's find)
    page.locator("#rc-preset-benchmark").click()  # the benchmark race, one click away, with its own time
    page.wait_for_function("document.querySelector('#rc-iterations input').value === '60'")
    assert [page.locator(f"#rc-{k} input").input_value() for k in form] == ["60", "10", "1", "8", "4"]
    # its own time: a new estimate, in seconds or minutes (the tiny test policy's lesson can make it "48 s")
    page.wait_for_function("t => document.querySelector('#rc-expected').innerText !== t", arg=class_time)
    page.locator("#rc-expected").get_by_text(re.compile(r"Expected time on this machine: (about )?\d")).wait_for()
    page.locator("#rc-preset-class").click()
    page.wait_for_function("document.querySelector('#rc-eval-repeats input').value === '1'")
    assert "search family" in page.locator("#rc-note").inner_text()
    # the measured curve behind the race: EMPO² and GRPO against the naive base rate (app/base_rate.py)
    accordion = page.locator("#rc-base-rate").get_by_role("button", name=re.compile(r"^Where memory matters"))
    accordion.click()
    page.locator("#rc-base-rate-chart .scatterlayer .trace").first.wait_for(timeout=30_000)
    assert page.locator("#rc-base-rate-chart .scatterlayer .trace").count() == 6  # seeds and mean: 2 arms and the gain
    assert "base rate" in page.locator("#rc-base-rate-text").inner_text()
    page.locator("#rc-base-rate").screenshot(path=str(artifacts / "race-base-rate.png"))  # docs/img/race-base-rate.png
    accordion.click()
    empty_note = page.locator("#rc-chart text.annotation-text").first
    empty_note.wait_for(timeout=30_000)
    assert empty_note.text_content() == "no data yet"  # an empty chart says so
    for key, value in (("iterations", "2"), ("group", "2"), ("step-limit", "2"), ("eval-every", "1"), ("seeds", "2")):
        page.locator(f"#rc-{key} input").fill(value)
    page.locator("#rc-start").click()
    try:
        page.locator("#rc-status").get_by_text(re.compile(r"\[done\]")).wait_for(timeout=480_000)
        page.locator("#rc-verdict").get_by_text(re.compile(r"(won: after 2 iterations|A tie: after 2 iterations)")).wait_for(timeout=30_000)
        assert "mean of 2 seeds" in page.locator("#rc-verdict").inner_text()
        page.locator("#rc-chart .scatterlayer .trace").first.wait_for(timeout=30_000)
        # per arm: training success, training score, the seeds' band, test success without memory
        assert page.locator("#rc-chart .scatterlayer .trace").count() == 8
        assert page.locator("#rc-chart .scatterlayer .trace .point").count() == 2 * (2 + 2 + 3)  # 3 evaluations: 0, 1, 2
        titles = page.evaluate("""() => [...document.querySelectorAll('#rc-chart text')]
            .filter(t => /^y\\d*title$/.test(t.getAttribute('class') || '')).map(t => t.textContent)""")
        assert titles == ["training success (%)", "training score (−100…100)", "test success, no memory (%)"]
        page.locator("#rc-table").get_by_text("GRPO").filter(visible=True).first.wait_for(timeout=30_000)
        assert page.locator("#rc-chart text.annotation-text").count() == 0
        assert page.locator("#rc-chart .ytick text").first.text_content().endswith("%")
    finally:
        page.screenshot(path=str(artifacts / "tab-race.png"), full_page=True)
