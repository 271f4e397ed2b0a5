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
    # each row: take the visible, last match)
    for stage in ("naive", "memory", "naive_again"):
        page.locator(f"#ls-table-{stage}").get_by_text(re.compile(r"^\d+%$")).last.wait_for(timeout=30_000)
    page.locator("#ls-table-distill").get_by_text(re.compile(r"^(yes|no)$")).last.wait_for(timeout=30_000)
    page.locator("#ls-chart .barlayer .point").first.wait_for(timeout=30_000)
    assert page.locator("#ls-chart .barlayer .point").count() == 3
    assert "lesson-trap-light-bulb" in page.locator("#ls-session").inner_text()
    # every distill step shows, the fifth not clipped: the table needs no scrolling
    page.locator("#ls-table-distill").get_by_text(re.compile(r"^5$")).last.wait_for(timeout=30_000)
    page.wait_for_timeout(500)
    clipped = page.evaluate("""() => [...document.querySelectorAll('#ls-table-distill *')]
        .filter(e => e.scrollHeight > e.clientHeight + 2 && getComputedStyle(e).overflowY.match(/auto|scroll/))
        .map(e => e.className)""")
    assert clipped == []
    assert "measured on this machine" in page.locator("#ls-session").inner_text()
    assert "%" in page.locator("#ls-chart .ytick text").first.text_content()
    page.screenshot(path=str(artifacts / "tab-lesson.png"), full_page=True)


@pytest.mark.timeout(300)
def test_race_draws_both_arms(page, studio_url, artifacts):
    page.goto(studio_url)
    page.get_by_role("tab", name="Race (EMPO² vs GRPO)").click()
    page.wait_for_function("document.querySelector('#rc-group input').value === '2'")
    empty_note = page.locator("#rc-chart text.annotation-text").first
    empty_note.wait_for(timeout=30_000)
    assert empty_note.text_content() == "no data yet"  # an empty chart says so
    assert page.locator("#rc-target input:checked").input_value() == "open"  # a trap session races itself
    page.locator("#rc-iterations input").fill("2")
    page.locator("#rc-step-limit input").fill("2")
    page.locator("#rc-start").click()
    try:
        page.locator("#rc-status").get_by_text(re.compile(r"\[done\]")).wait_for(timeout=120_000)
        page.locator("#rc-chart .scatterlayer .trace").first.wait_for(timeout=30_000)
        assert page.locator("#rc-chart .scatterlayer .trace").count() == 4  # 2 arms × (success, score)
        page.locator("#rc-table").get_by_text("GRPO").last.wait_for(timeout=30_000)
        assert page.locator("#rc-chart .scatterlayer .trace .point").count() == 8  # a marker per arm, iteration, panel
        assert page.locator("#rc-chart text.annotation-text").count() == 0
        assert page.locator("#rc-chart .ytick text").first.text_content().endswith("%")
        assert "elapsed" in page.locator("#rc-status").inner_text() or "iteration(s) per arm in" in page.locator("#rc-status").inner_text()
    finally:
        page.screenshot(path=str(artifacts / "tab-race.png"), full_page=True)
