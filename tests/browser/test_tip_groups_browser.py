"""The Tips tab's groups view in headless Chromium, on a structured session (`memory.structure
structured`, tiny random policy, hash embedder, tmp sessions): the groups with their counts, a group's
tips, pinning one and adding one to a group. Screenshot: test-artifacts/tip-groups.png."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.browser
TASK = "trap-light-bulb"
KITCHEN = f"{TASK} · v0 · kitchen"


@pytest.fixture(scope="module")
def served(tmp_path_factory, port, studio_cfg):
    """(url, studio) of a studio whose default session keeps a structured memory with three tips."""
    from empo2_studio.app import launch

    cfg = studio_cfg.with_overrides(memory={"structure": "structured"})
    demo, studio = launch(port=port, sessions_dir=tmp_path_factory.mktemp("sessions"), env="trap", policy="tiny",
                          embedder="hash", config=cfg, block=False, quiet=True)  # fmt: skip
    store = studio.store(studio.default_run_id)
    store.add_tip(TASK, 0, "apples grow on trees", place="kitchen")
    store.add_tip(TASK, 0, "the key is under the mat", place="kitchen")
    store.add_tip(TASK, 0, "a note for the whole task")
    yield demo.local_url, studio
    demo.close()
    studio.close()



@pytest.mark.timeout(300)
def test_the_groups_view_lists_groups_and_pins_and_adds_in_a_group(page, served, artifacts, pick):
    url, studio = served
    page.goto(url)
    page.get_by_role("tab", name="Tips").click()
    page.get_by_text("Groups (structured memory)").click()
    page.locator("#tips-groups-show").click()
    page.locator("#tips-groups-status").get_by_text("2 group(s), 3 live tip(s), 0 retired").wait_for()
    page.locator("#tips-groups").get_by_text(KITCHEN).filter(visible=True).first.wait_for()
    pick(page, "tips-group-pick", KITCHEN)
    page.locator("#tips-group-tips").get_by_text("the key is under the mat").filter(visible=True).first.wait_for(timeout=60_000)
    store = studio.store(studio.default_run_id)
    key = next(r for r in store.group_rows(TASK, 0, "kitchen") if r["text"] == "the key is under the mat")
    pick(page, "tips-group-selected", f"{key['id'][:8]} · the key is under the mat")
    page.keyboard.press("Escape")
    page.locator("#tips-group-pin").click()
    page.locator("#tips-groups-status").get_by_text("pinned 1 tip(s)").wait_for()
    assert store.group_rows(TASK, 0, "kitchen")[0]["pinned"]  # pinned first
    page.locator("#tips-group-text textarea, #tips-group-text input").first.fill("the bulb is on the shelf")
    page.locator("#tips-group-add").click()
    page.locator("#tips-groups-status").get_by_text("added tip").wait_for()
    page.locator("#tips-group-tips").get_by_text("the bulb is on the shelf").filter(visible=True).first.wait_for(timeout=60_000)
    assert [g.tips for g in store.groups()] == [1, 3]
    page.screenshot(path=str(artifacts / "tip-groups.png"), full_page=True)
