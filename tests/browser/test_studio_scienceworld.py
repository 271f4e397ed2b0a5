"""The studio in headless Chromium on ScienceWorld with the real embedded model and MiniLM embedder.

Measured on the shared 2-core dev box: model preparation ~60 s, ~50 s to the first step (JVMs,
few-shot prefill), ~10 s per step; the reflection (two tips written by the 4-bit model on CPU) took
~10 min there, so this test presses Stop while the episodes play, which skips the tip writing.
"""

from __future__ import annotations

import re

import pytest

from empo2_studio.config import EnvConfig, RunConfig

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.scienceworld]
STEPS = 3


@pytest.fixture(scope="module")
def real_studio_url(tmp_path_factory, port):
    from empo2_studio.app import launch

    cfg = RunConfig(env=EnvConfig(name="scienceworld", task="power-component", step_limit=STEPS))
    demo, studio = launch(
        port=port, sessions_dir=tmp_path_factory.mktemp("sessions"), env="scienceworld", config=cfg,
        block=False, quiet=True,
    )  # fmt: skip
    yield demo.local_url, studio
    demo.close()
    studio.close()


def test_scienceworld_side_by_side_with_the_embedded_model(page, real_studio_url, artifacts):
    url, studio = real_studio_url
    page.set_default_timeout(600_000)
    page.goto(url)
    # first start: the banner shows progress until the model is prepared
    page.locator("#model-banner").get_by_text(re.compile("model ready")).wait_for()
    page.wait_for_function("document.querySelector('#ep-variation input').value !== ''")
    page.locator("#ep-run").click()
    page.locator("#ep-naive .e2-step").first.wait_for()
    page.locator("#ep-memory .e2-step").first.wait_for()
    page.locator("#ep-stop").click()
    page.locator("#ep-status").get_by_text(re.compile(r"\[stopped\]")).wait_for()
    assert 1 <= page.locator("#ep-naive .e2-step").count() <= STEPS
    assert 1 <= page.locator("#ep-memory .e2-step").count() <= STEPS
    page.screenshot(path=str(artifacts / "scienceworld-episodes.png"), full_page=True)
    assert len(studio.session(studio.default_run_id).episodes()) == 2  # saved even when stopped
