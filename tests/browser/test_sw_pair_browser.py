"""The ScienceWorld trap in one Episodes pair, in headless Chromium (issue 47, bar 6).

A ScienceWorld session of the studio (its defaults: the embedded SmolLM2 model on the shipped
ScienceWorld adapter, the real MiniLM embedder, real JVMs), the Lesson's task find-animal picked on the
Episodes tab (it plays the Lesson's 10 steps), the offered curated tip stored with the button, one pair
at the Lesson's temperature 1.0: the memory episode reads the tip, teleports outside, focuses on the
animal and wins (score 100); the naive one, without a tip, does not win. Measured without a browser
with the tab's own functions (benchmarks/bench_sw_pair.py, docs/benchmarks/sw_pair.md): with the
shipped adapter the memory side won 16 of 16 pairs (variations 0, 1, 5, 10; seeds 0, 1; T = 1.0 and
0.4), the naive side none, picking up what is in its room (variation 1: "pick up bowl" first).
Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import re
import time

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.scienceworld]
TASK = "find-animal"
VARIATION = 1  # train, one of the Lesson's two; starts in the art studio, the animals (blue jay, …) are outside
TEMPERATURE = "1"  # the Lesson's (rollout.train_temperature); the tab's default is 0.4
TIP_START = "Animals are never indoors: teleport to outside"
PAIR_BOUND_S = 300  # measured 16.6–38.6 s a pair at 10 steps under load ~3–4 on a shared 2-core CPU; not a timing test


@pytest.fixture(scope="module")
def sw_studio(tmp_path_factory, port):
    from empo2_studio.app import launch

    demo, studio = launch(port=port, sessions_dir=tmp_path_factory.mktemp("sessions"), env="scienceworld",
                          block=False, quiet=True)  # fmt: skip
    yield demo.local_url, studio
    demo.close()
    studio.close()


@pytest.fixture
def slow_page(page):
    page.set_default_timeout(900_000)  # the real model and JVMs on a shared 2-core CPU
    return page



def test_the_naive_side_falls_into_the_trap_and_the_memory_side_reads_the_tip_and_wins(slow_page, sw_studio, artifacts, pick):
    page, (url, studio) = slow_page, sw_studio
    run_id = studio.default_run_id
    assert studio.session(run_id).config.env.name == "scienceworld"
    page.goto(url)
    page.locator("#model-banner").get_by_text(re.compile("model ready")).wait_for()
    page.get_by_role("tab", name="Episodes").click()
    page.wait_for_function("document.querySelector('#ep-task input').value === 'power-component'")
    page.locator("#ep-note").get_by_text("rarely scores").wait_for()

    pick(page, "ep-task", TASK)
    page.wait_for_function(f"document.querySelector('#ep-task input').value === {TASK!r}")
    pick(page, "ep-variation", f"{VARIATION} · train")
    # the tip plays the simulator's gold path once (seconds), then the box shows it
    page.wait_for_function(
        f"document.querySelector('#ep-tip textarea')?.value?.startsWith({TIP_START!r}) && "
        f"document.querySelector('#ep-session').innerText.endsWith('{TASK} variation {VARIATION} (train)')"
    )
    assert "step limit 10 (the Lesson's" in page.locator("#ep-session").inner_text()
    tip = page.locator("#ep-tip textarea").input_value()
    assert "then focus on" in tip and "then move" in tip
    memory_line = page.locator("#ep-memory-line")
    memory_line.get_by_text(f"variation {VARIATION}: no tip").wait_for()
    page.screenshot(path=str(artifacts / "sw-pair-offer.png"), full_page=True)

    page.locator("#ep-store-tip").click()
    memory_line.get_by_text("1 enabled tip(s), 1 curated").wait_for()
    assert [t.text for t in studio.store(run_id).list_tips(task=TASK, variation=VARIATION)] == [tip]

    temperature = page.locator("#ep-temperature input[type=number]")
    temperature.fill(TEMPERATURE)
    temperature.press("Tab")
    t0 = time.monotonic()
    page.locator("#ep-run").click()
    page.locator("#ep-status").get_by_text(re.compile(r"\[done\]")).wait_for()
    seconds = time.monotonic() - t0
    print(f"\nScienceWorld {TASK} v{VARIATION} pair in the browser: {seconds:.0f} s (run click to [done])")
    page.locator("#ep-chart .scatterlayer .trace").first.wait_for()
    page.locator("#ep-memory").scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / "sw-pair-done.png"), full_page=True)

    naive = page.locator("#ep-naive .e2-col-title").inner_text()
    memory = page.locator("#ep-memory .e2-col-title").inner_text()
    assert "finished · score 100 · won" in memory, memory
    assert "finished · score" in naive and "won" not in naive, naive
    assert page.locator("#ep-memory .e2-tiptext", has_text=TIP_START).count() >= 1  # it read the tip
    assert page.locator("#ep-naive .e2-tiptext").count() == 0

    episodes = {e.rollout_mode: e for e in studio.session(run_id).episodes() if e.group_id.startswith("side-")}
    assert sorted(episodes) == ["memory", "naive"]
    naive_ep, memory_ep = episodes["naive"], episodes["memory"]
    assert (naive_ep.task, naive_ep.variation, memory_ep.task, memory_ep.variation) == (TASK, VARIATION, TASK, VARIATION)
    assert naive_ep.temperature == memory_ep.temperature == float(TEMPERATURE)  # the page's pick was played
    assert memory_ep.score == 100 and memory_ep.won
    actions = [s.action for s in memory_ep.steps]
    focus = next(i for i, a in enumerate(actions) if a.startswith("focus on"))
    assert "teleport to outside" in actions[:focus]  # went where the tip says before it focused
    assert naive_ep.score < 100 and not naive_ep.won
    assert len(naive_ep.steps) <= 10 and len(memory_ep.steps) <= 10  # the Lesson's step limit
    print("naive:", naive_ep.score, [s.action for s in naive_ep.steps])
    print("memory:", memory_ep.score, [s.action for s in memory_ep.steps])
    assert seconds < PAIR_BOUND_S
