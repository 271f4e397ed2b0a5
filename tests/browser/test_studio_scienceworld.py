"""The studio in headless Chromium on ScienceWorld with the real embedded model and MiniLM embedder.

The issue's done-when, in the browser only: a ScienceWorld episode plays naive vs memory side by side
with the embedded 4-bit LoRA model, its tips appear in the Tips tab, then one Train iteration and one
Distill step complete and show in the charts. One module-scoped studio; the tests run in order and
build on each other (the distill step learns from the memory episode of the first test).
"""

from __future__ import annotations

import re

import pytest

from empo2_studio.config import EnvConfig, RolloutConfig, RunConfig, TrainConfig

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.scienceworld]
STEPS = 3


@pytest.fixture(scope="module")
def real_studio(tmp_path_factory, port):
    from empo2_studio.app import launch

    cfg = RunConfig(
        env=EnvConfig(name="scienceworld", task="power-component", variations=(0,), step_limit=STEPS),
        rollout=RolloutConfig(group_size=2),
        train=TrainConfig(iterations=1, checkpoint_every=1),
    )
    demo, studio = launch(
        port=port, sessions_dir=tmp_path_factory.mktemp("sessions"), env="scienceworld", config=cfg,
        block=False, quiet=True,
    )  # fmt: skip
    yield demo.local_url, studio
    demo.close()
    studio.close()


@pytest.fixture
def slow_page(page):
    page.set_default_timeout(900_000)  # the real model on a shared 2-core CPU (both tests: ~2 min quiet)
    return page


def _points(page, chart: str) -> int:
    """Markers drawn in the first trace of a plotly chart."""
    return page.locator(f"#{chart} .scatterlayer .trace").first.locator(".points path").count()


def test_side_by_side_writes_tips_that_the_tips_tab_lists(slow_page, real_studio, artifacts):
    page, (url, studio) = slow_page, real_studio
    page.goto(url)
    # first start: the banner shows progress until the model is prepared
    page.locator("#model-banner").get_by_text(re.compile("model ready")).wait_for()
    page.get_by_role("tab", name="Episodes").click()  # the page opens on the Lesson tab
    page.wait_for_function("document.querySelector('#ep-variation input').value !== ''")
    # a ScienceWorld session on the embedded model says what the model can and cannot do there
    page.locator("#ep-note").get_by_text("rarely scores").wait_for()
    page.locator("#ep-run").click()
    page.locator("#ep-naive .e2-step").first.wait_for()
    page.locator("#ep-memory .e2-step").first.wait_for()
    page.locator("#ep-status").get_by_text(re.compile(r"\[done\]")).wait_for()
    assert 1 <= page.locator("#ep-naive .e2-step").count() <= STEPS
    assert 1 <= page.locator("#ep-memory .e2-step").count() <= STEPS
    page.locator("#ep-chart .scatterlayer .trace").first.wait_for()
    page.screenshot(path=str(artifacts / "scienceworld-episodes.png"), full_page=True)

    episodes = studio.session(studio.default_run_id).episodes()
    assert sorted(e.rollout_mode for e in episodes) == ["memory", "naive"]
    assert all(e.tip for e in episodes)  # the model (or the marked fallback) wrote both tips

    page.get_by_role("tab", name="Tips").click()
    page.locator("#tips-refresh").click()
    for episode in episodes:
        # each tip is stored once per step; its first words are enough to find it in the grid
        page.locator("#tips-table").get_by_text(" ".join(episode.tip.split()[:6])).filter(visible=True).first.wait_for()
    page.screenshot(path=str(artifacts / "scienceworld-tips.png"), full_page=True)


def test_train_iteration_then_distill_show_in_the_charts(slow_page, real_studio, artifacts):
    page, (url, studio) = slow_page, real_studio
    page.goto(url)
    page.get_by_role("tab", name="Train").click()
    page.wait_for_function("document.querySelector('#tr-iterations input').value === '1'")
    page.locator("#tr-start").click()
    page.locator("#tr-status").get_by_text(re.compile(r"\[done\]")).wait_for()
    page.locator("#tr-score .scatterlayer .trace").first.wait_for()
    page.locator("#tr-loss .scatterlayer .trace").first.wait_for()
    before = _points(page, "tr-loss")
    assert before == 1

    # Distill now: pick the side-by-side memory episode (listed when the Train tab opens)
    page.get_by_role("tab", name="Episodes").click()
    page.get_by_role("tab", name="Train").click()
    page.locator("#tr-distill-ids input").click()
    page.get_by_role("option").first.click()
    page.keyboard.press("Escape")
    page.locator("#tr-distill").click()
    page.locator("#tr-status").get_by_text(re.compile(r"\[done\] distilled")).wait_for()
    page.wait_for_function(
        "document.querySelectorAll('#tr-loss .scatterlayer .trace:first-child .points path').length >= 2"
    )
    page.screenshot(path=str(artifacts / "scienceworld-train.png"), full_page=True)
    kinds = [r["kind"] for r in studio.session(studio.default_run_id).metrics()]
    assert kinds[-2:] == ["train", "distill"]
