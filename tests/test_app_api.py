"""The studio's named API through `gradio_client`, against a studio served in this process (trap env,
tiny random policy, hash embedder, tmp sessions): the endpoint list, typed parameters, JSON results,
a refused input, and the studio's memory over repeated work."""

from __future__ import annotations

import socket

import pytest

from empo2_studio.app import api

TASK = "trap-light-bulb"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory, studio_cfg):
    """(client, studio) of a studio served on a free local port with the model prepared."""
    import torch
    from gradio_client import Client

    from empo2_studio.app import launch

    torch.set_num_threads(1)
    demo, studio = launch(port=_free_port(), sessions_dir=tmp_path_factory.mktemp("sessions"), env="trap",
                          policy="tiny", embedder="hash", config=studio_cfg, block=False, quiet=True)  # fmt: skip
    studio.jobs.wait(studio.prepare_model().job_id, 300)
    client = Client(demo.local_url, verbose=False)
    yield client, studio
    client.close()
    demo.close()
    studio.close()


def test_the_api_page_lists_exactly_the_named_endpoints_with_typed_parameters(served):
    client, _ = served
    info = client.view_api(print_info=False, return_format="dict")
    assert sorted(info["named_endpoints"]) == sorted(f"/{name}" for name in api.ENDPOINTS)
    assert info["unnamed_endpoints"] == {}
    params = {p["parameter_name"]: p for p in info["named_endpoints"]["/run_pair"]["parameters"]}
    assert list(params) == ["run_id", "task", "variation", "split", "seed", "temperature", "checkpoint", "wait",
                            "timeout_s"]  # fmt: skip
    assert params["variation"]["python_type"]["type"] == "int"
    assert params["split"]["python_type"]["type"] == "Literal['train', 'dev', 'test']"
    assert params["split"]["parameter_default"] == "train"
    text = client.view_api(print_info=False, return_format="str")
    assert "Literal[]" not in text


def test_run_pair_returns_both_episodes_of_the_sessions_env_and_job_polls_it(served):
    client, studio = served
    info = client.predict("studio", api_name="/session_info")
    assert (info["env"], info["task"], info["train_variations"], info["step_limit"]) == ("trap", TASK, [0, 1], 3)
    out = client.predict("studio", TASK, 1, api_name="/run_pair")
    job = out["job"]
    assert (job["kind"], job["status"], job["run_id"]) == ("episodes", "done", "studio")
    naive, memory = out["naive"], out["memory"]
    assert (naive["rollout_mode"], memory["rollout_mode"]) == ("naive", "memory")
    assert {naive["env"], memory["env"]} == {"trap"} and {naive["task"], memory["task"]} == {TASK}
    assert 1 <= len(naive["steps"]) <= 3 and naive["group_id"] == memory["group_id"]
    saved = {e.episode_id for e in studio.session("studio").episodes()}
    assert {naive["episode_id"], memory["episode_id"]} <= saved
    polled = client.predict(job["job_id"], api_name="/job")
    assert polled["status"] == "done" and [e["episode_id"] for e in polled["result"]] == [
        naive["episode_id"], memory["episode_id"]]
    assert client.predict("no-such-job", api_name="/job") == {"status": "unknown"}


def test_a_refused_input_is_one_line_and_logs_no_traceback(served, capfd):
    from gradio_client.exceptions import AppError

    client, studio = served
    capfd.readouterr()
    with pytest.raises(AppError) as err:
        client.predict("studio", TASK, 99999, api_name="/run_pair")
    assert str(err.value) == "trap-light-bulb has no variation 99999 in the train split; valid: 0…23"
    with pytest.raises(AppError) as err:
        client.predict("studio", TASK, "abc", api_name="/run_pair")
    assert str(err.value) == "variation must be a whole number, got 'abc'; valid in the train split of trap-light-bulb: 0…23"
    with pytest.raises(AppError) as err:
        client.predict("naive", TASK, [99999], 8, 5, api_name="/play_lesson")
    assert str(err.value) == "variation 99999 is not a variation of 'trap-light-bulb'; valid: 0…47"
    with pytest.raises(AppError, match="not a memory episode of session 'studio': 'nope'"):
        client.predict("studio", ["nope"], api_name="/distill")
    with pytest.raises(AppError, match="no session 'nope'"):
        client.predict("nope", api_name="/session_info")
    with pytest.raises(AppError) as err:
        client.predict("studio", "boil", 0, api_name="/offered_tip")
    assert str(err.value) == ("no tip is offered for 'boil' variation 0 on a trap session; the Episodes tab offers one "
                              "for the Lesson's tasks there (trap-find-animal, trap-light-bulb, trap-water-plant) and their variations")
    out, errors = capfd.readouterr()
    assert "Traceback" not in out + errors


def test_play_a_lesson_stage_and_get_its_table(served):
    client, studio = served
    out = client.predict("naive", TASK, [0], 2, 1, api_name="/play_lesson")
    assert out["job"]["status"] == "done", out["job"]
    (stage,) = out["stages"]
    assert stage["stage"] == "naive" and [(r["variation"], r["episodes"]) for r in stage["rows"]] == [(0, 2)]
    assert 0 <= stage["rows"][0]["successes"] <= 2
    sessions = {s["run_id"]: s for s in client.predict(api_name="/sessions")}
    assert sessions["lesson-trap-light-bulb"]["env"] == "trap"


def test_repeated_pairs_do_not_grow_the_studio(served):
    """Five side-by-side pairs through the API (each drawn as the page's poll draws it): the process's
    RSS after the fifth stays within 0.3 GB of where the second left it."""
    import gc

    import psutil

    from empo2_studio.app import episodes_tab

    client, studio = served
    rss = []
    for seed in range(5):
        out = client.predict("studio", TASK, 0, "train", seed, api_name="/run_pair")
        assert out["job"]["status"] == "done"
        episodes_tab.poll_side_by_side(studio, out["job"]["job_id"], -1)  # the page's rendering of the pair
        gc.collect()
        rss.append(psutil.Process().memory_info().rss / 2**30)
    assert rss[4] - rss[1] < 0.3, [f"{r:.3f} GiB" for r in rss]


def test_launch_imports_the_shared_modules_before_the_model_thread_starts(monkeypatch, tmp_path, studio_cfg):
    """The page and the model thread both import narwhals lazily; two threads importing it at once
    deadlock (the studio died at start), so launch imports it on the main thread before the thread."""
    import sys

    from empo2_studio import app as app_pkg
    from empo2_studio.app.studio import Studio

    calls: list[str] = []
    real_import = app_pkg.import_shared_modules
    monkeypatch.setattr(app_pkg, "import_shared_modules", lambda: (real_import(), calls.append("import")))
    monkeypatch.setattr(Studio, "prepare_model",
                        lambda self: calls.append("prepare" if all(m in sys.modules for m in app_pkg.SHARED_MODULES) else "?"))
    demo, studio = app_pkg.launch(port=_free_port(), sessions_dir=tmp_path, env="trap", policy="tiny", embedder="hash",
                                  config=studio_cfg, block=False, quiet=True)  # fmt: skip
    demo.close()
    studio.close()
    assert calls == ["import", "prepare"]


def test_the_offered_tip_is_the_episodes_tabs_and_stores_with_add_tip(served):
    from empo2_studio.lesson import curated_tip

    client, studio = served
    text = client.predict("studio", TASK, 2, api_name="/offered_tip")
    assert text == curated_tip(TASK, 2) and text  # what the tab pre-fills for that variation
    assert client.predict("studio", TASK, 2, text, api_name="/add_tip").startswith("added tip")
    (tip,) = [t for t in client.predict("studio", TASK, 2, api_name="/tips") if t["text"] == text]
    assert (tip["score"], tip["origin"]) == (100.0, "manual")
