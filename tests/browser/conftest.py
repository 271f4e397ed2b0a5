"""Fixtures for the browser tests: the studio served on a free local port, headless Debian Chromium."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def port() -> int:
    """A free local TCP port for one module's studio."""
    return free_port()


@pytest.fixture(scope="session")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium; .ci/run does it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    p = context.new_page()
    p.set_default_timeout(240_000)  # a shared 2-core CI box can be slow
    yield p
    context.close()


def choose(page, elem_id: str, option: str, tries: int = 5) -> None:
    """Choose `option` in the Gradio dropdown `elem_id` the way a user does: open it by its text box
    (a click on the component's centre can land on its label), then click the option. A list that
    does not open within 20 s (an update from a load event arriving just then closes it) is opened
    again, up to `tries` times; the last try waits the page's default timeout."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    item = page.get_by_role("option", name=option, exact=True)
    for attempt in range(tries):
        page.locator(f"#{elem_id} input").click()
        try:
            item.wait_for(timeout=20_000 if attempt < tries - 1 else None)
            break
        except PlaywrightTimeout:  # close whatever opened, open it again
            page.keyboard.press("Escape")
    item.click()


@pytest.fixture
def pick():
    """`choose`, for tests: pick(page, elem_id, option)."""
    return choose


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="module")
def served(tmp_path_factory, port, studio_cfg):
    """(URL, Studio) of a studio served for one module (trap env, tiny policy, hash embedder,
    `studio_cfg`), with the model prepared. The Studio object lets a test check what was stored."""
    import torch

    from empo2_studio.app import launch

    torch.set_num_threads(1)
    demo, studio = launch(
        port=port, sessions_dir=tmp_path_factory.mktemp("sessions"), env="trap", policy="tiny",
        embedder="hash", config=studio_cfg, block=False, quiet=True,
    )  # fmt: skip
    studio.jobs.wait(studio.prepare_model().job_id, 300)
    yield demo.local_url, studio
    demo.close()
    studio.close()


@pytest.fixture(scope="module")
def studio_url(served) -> str:
    return served[0]
