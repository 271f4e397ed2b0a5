"""The studio's first screen and a session switch in headless Chromium (tiny random policy, hash
embedder, tmp sessions): the page opens on the Lesson tab of a trap session; opening another session
in the Sessions tab renews the Episodes form (task, variations, step limit) and the pair it plays is of
that session; the start panel's button opens a ScienceWorld session one click away. Screenshots go to
test-artifacts/ (first-screen.png, switch-episodes.png, switch-scienceworld.png)."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

pytestmark = pytest.mark.browser
OTHER = "other-animal"


@pytest.fixture(scope="module")
def served(tmp_path_factory, port, studio_cfg):
    """(url, studio): the default trap session "studio" (light bulb, 3 steps) and a second trap session
    `OTHER` (find-animal, variations 2–3, 2 steps)."""
    import torch

    from empo2_studio.app import launch

    torch.set_num_threads(1)
    demo, studio = launch(port=port, sessions_dir=tmp_path_factory.mktemp("sessions"), policy="tiny",
                          embedder="hash", config=studio_cfg, block=False, quiet=True)  # fmt: skip
    other = studio_cfg.with_overrides(env={"task": "trap-find-animal", "variations": (2, 3), "step_limit": 2})
    studio.create_session(replace(other, run_id=OTHER))
    studio.jobs.wait(studio.prepare_model().job_id, 300)
    yield demo.local_url, studio
    demo.close()
    studio.close()


def _value(page, elem_id: str) -> str:
    return page.locator(f"#{elem_id} input").first.input_value()


def test_the_page_opens_on_the_lesson_of_a_trap_session(page, served, artifacts):
    url, studio = served
    page.goto(url)
    assert studio.session(studio.default_run_id).config.env.name == "trap"  # no env asked: trap
    page.locator("#ls-intro").wait_for()
    assert page.get_by_role("tab", name="Lesson").get_attribute("aria-selected") == "true"
    assert page.get_by_role("tab").first.inner_text().strip() == "Lesson"
    page.locator("#start-panel").get_by_text("Start here").wait_for()
    page.locator("#session-banner").get_by_text("trap").wait_for()
    page.screenshot(path=str(artifacts / "first-screen.png"), full_page=False)


def test_a_session_switch_renews_the_form_and_plays_that_sessions_env(page, served, artifacts, pick):
    url, studio = served
    page.goto(url)
    page.get_by_role("tab", name="Episodes").click()
    page.wait_for_function("document.querySelector('#ep-task input').value === 'trap-light-bulb'")
    page.get_by_role("tab", name="Sessions").click()
    page.locator("#ses-refresh").click()
    page.locator("#ses-table").get_by_text(OTHER, exact=True).filter(visible=True).first.wait_for()
    pick(page, "ses-pick", OTHER)
    page.locator("#ses-open").click()
    page.locator("#session-banner").get_by_text(OTHER).wait_for()

    page.get_by_role("tab", name="Episodes").click()
    page.wait_for_function("document.querySelector('#ep-task input').value === 'trap-find-animal'")
    assert page.locator("#ep-env input[value='trap']").is_checked()
    assert _value(page, "ep-variation") == "2 · train"  # the session's training variations (2, 3)
    page.locator("#ep-session").get_by_text(re.compile(r"step limit 2")).wait_for()
    page.locator("#ep-run").click()
    page.locator("#ep-status").get_by_text(re.compile(r"\[done\]")).wait_for()
    page.locator("#ep-naive .e2-task").get_by_text("trap-find-animal").wait_for()
    page.screenshot(path=str(artifacts / "switch-episodes.png"), full_page=True)
    played = studio.session(OTHER).episodes()
    assert sorted(e.rollout_mode for e in played) == ["memory", "naive"]
    assert {(e.env, e.task, e.variation) for e in played} == {("trap", "trap-find-animal", 2)}
    assert all(len(e.steps) <= 2 for e in played)
    assert studio.session(studio.default_run_id).episodes() == []  # nothing played in the other session

    # ScienceWorld, one click away: the form follows, the previous pair leaves the page
    page.locator("#start-scienceworld").click()
    page.locator("#session-banner").get_by_text("scienceworld").wait_for()
    page.wait_for_function("document.querySelector('#ep-task input').value === 'power-component'")
    assert page.locator("#ep-env input[value='scienceworld']").is_checked()
    assert page.locator("#ep-naive .e2-step").count() == 0
    assert "idle" in page.locator("#ep-status").inner_text()
    assert not page.locator("#ep-note").is_visible()  # the tiny test model is not the embedded one
    page.screenshot(path=str(artifacts / "switch-scienceworld.png"), full_page=True)


def test_an_export_shows_its_file_in_the_download_box(page, served, artifacts):
    url, _ = served
    page.goto(url)
    page.get_by_role("tab", name="Sessions").click()
    assert not page.locator("#ses-download").is_visible()  # no empty upload-sized box before an export
    page.wait_for_function("document.querySelector('#ses-pick input').value !== ''")
    page.locator("#ses-export-tips").click()
    page.locator("#ses-status").get_by_text("exported").wait_for()
    page.locator("#ses-download").get_by_text(re.compile(r"tips-.*\.jsonl")).first.wait_for()
    page.screenshot(path=str(artifacts / "sessions-export.png"), full_page=True)
