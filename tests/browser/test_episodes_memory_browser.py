"""The Episodes tab's memory before a pair, in headless Chromium (trap env, tiny policy, hash embedder).

Issue 50: the first pair of a new session showed two alike columns, because the memory held no tip
and nothing on the tab said so; and the info line kept naming the session's task after another task
was chosen. Here: the tab says the memory is empty, offers the Lesson's curated tip for the chosen
variation, stores it only on the button, the next pair's memory column retrieves it, and the info line
and the offered tip follow a task and a variation picked on the page.
"""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.browser

BULB_V1 = ("The yellow light bulb is in the workshop: go to workshop, then focus on yellow light bulb, then turn on "
           "yellow light bulb.")  # TrapEnv.curated_tip("trap-light-bulb", 1)
BULB_V0 = ("The green light bulb is in the kitchen: go to kitchen, then focus on green light bulb, then turn on "
           "green light bulb.")
ANIMAL_V0 = "The rabbit is in the kitchen: go to kitchen, then focus on rabbit, then pick up rabbit."



@pytest.mark.timeout(300)
def test_the_curated_tip_is_offered_stored_on_request_and_retrieved(page, served, artifacts, pick):
    url, studio = served
    store = studio.store(studio.default_run_id)
    page.goto(url)
    page.get_by_role("tab", name="Episodes").click()
    page.wait_for_function("document.querySelector('#ep-variation input').value !== ''")
    pick(page, "ep-variation", "1 · train")  # variation 1: no earlier test of this module stores tips there
    page.wait_for_function(f"document.querySelector('#ep-tip textarea').value === {BULB_V1!r}")
    memory = page.locator("#ep-memory-line")
    memory.get_by_text(re.compile("variation 1: no tip")).wait_for()
    assert store.count("trap-light-bulb", 1) == 0  # offered, not stored
    assert "**this pair**" not in page.locator("#ep-session").inner_text()  # markdown is rendered
    assert page.locator("#ep-session").inner_text().endswith("this pair: trap-light-bulb variation 1 (train)")

    box = page.locator("#ep-tip textarea")
    box.fill("EDITED " + box.input_value())
    page.locator("#ep-store-tip").click()
    memory.get_by_text("1 enabled tip(s), 1 curated").wait_for()
    assert [t.text for t in store.list_tips(task="trap-light-bulb", variation=1)] == ["EDITED " + BULB_V1]

    page.locator("#ep-run").click()
    page.locator("#ep-status").get_by_text(re.compile(r"\[done\]")).wait_for()
    assert page.locator("#ep-memory .e2-tiptext", has_text="EDITED " + BULB_V1).count() >= 1
    assert page.locator("#ep-naive .e2-tiptext").count() == 0
    page.screenshot(path=str(artifacts / "tab-episodes-tip.png"), full_page=True)

    # another task: the info line, the variation list and the offered tip follow it
    pick(page, "ep-task", "trap-find-animal")
    page.wait_for_function(f"document.querySelector('#ep-tip textarea').value === {ANIMAL_V0!r}")
    line = page.locator("#ep-session").inner_text()
    assert "task trap-find-animal (the session trains on trap-light-bulb)" in line
    assert line.endswith("this pair: trap-find-animal variation 0 (train)")
    # back to the session's task: the variation stays 0, and the line and the tip still follow the task
    pick(page, "ep-task", "trap-light-bulb")
    page.wait_for_function(f"document.querySelector('#ep-tip textarea').value === {BULB_V0!r}")
    assert page.locator("#ep-session").inner_text().endswith("this pair: trap-light-bulb variation 0 (train)")
