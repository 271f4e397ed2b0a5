"""The Lesson tab's ScienceWorld lesson form in headless Chromium (trap studio, tiny policy, hash
embedder; the real simulator builds the tips): picking find-animal sets its default lesson — eight
variations over four animal blocks, 2 episodes each — and fills eight tip boxes from the simulator's
gold paths, each naming its variation's animal and box. The screenshot goes to
test-artifacts/tab-lesson-scienceworld.png."""

from __future__ import annotations

import re

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.scienceworld]


@pytest.mark.timeout(600)
def test_picking_find_animal_sets_its_lesson_and_fills_eight_tips(page, studio_url, artifacts, pick):
    page.goto(studio_url)
    page.locator("#ls-tip-0 textarea").wait_for()
    pick(page, "ls-task", "find-animal (ScienceWorld)")
    # eight gold paths played on one simulator (about 30 s on a quiet CPU, a minute under load)
    page.wait_for_function("(document.querySelector('#ls-tip-7 textarea') || {}).value?.startsWith('Animals are never indoors')")
    assert page.locator("#ls-episodes input").input_value() == "2"
    tokens = [t.strip(" ×\n") for t in page.locator("#ls-variations .token").all_inner_texts()]
    assert tokens == ["0", "1", "30", "31", "60", "61", "90", "91"]
    assert not page.locator("#ls-tip-8").is_visible()
    tips = [page.locator(f"#ls-tip-{i} textarea").input_value() for i in range(8)]
    for tip in tips:  # the plan in the words of the valid actions, the box from the task text
        assert re.fullmatch(r"Animals are never indoors: teleport to outside, then look around, then focus on (.+), "
                            r"then pick up \1, then teleport to kitchen, then move \1 to \w+ box\.", tip), tip
    assert "8 variations, 2 episodes each" in page.locator("#ls-session").inner_text()
    page.screenshot(path=str(artifacts / "tab-lesson-scienceworld.png"), full_page=True)
