"""The charts of the Episodes, Train, Adapt and Sessions tabs (`app.figures`) and the step cards'
wording: what a class reads off them, checked on hand-made rows."""

from __future__ import annotations

from dataclasses import replace

import pytest

from empo2_studio.app import figures, render
from empo2_studio.types import ActionSample, RetrievedTip, Step


def _annotations(fig) -> list[str]:
    return [a.text for a in fig.layout.annotations]


def test_an_empty_chart_says_no_data_yet_instead_of_drawing_axes():
    for fig in (figures.episode_scores_figure({"naive": [], "memory": []}), figures.adapt_figure([]),
                *figures.train_figures([]), figures.compare_runs_figure({"a": [{"iteration": 1}]}, "loss/policy")):  # fmt: skip
        assert _annotations(fig) == ["no data yet"]
        assert fig.layout.xaxis.visible is False and fig.layout.yaxis.visible is False
    assert _annotations(figures.episode_scores_figure({"naive": [0.0], "memory": []})) == []


def test_coinciding_lines_stay_visible_each_mode_its_colour_and_marker():
    fig = figures.episode_scores_figure({"naive": [0, 10], "memory": [0, 10]})
    naive, memory = fig.data
    assert naive.marker.symbol == "circle-open" and memory.marker.symbol == "diamond"
    assert naive.marker.size > memory.marker.size  # the open ring is drawn around the diamond
    assert naive.line.color != memory.line.color and naive.line.dash != memory.line.dash
    modes = figures.score_by_mode_figure([{"iteration": i + 1, "rollout/score_mean": 5.0, "rollout/update_mode": float(i)}
                                          for i in range(3)])  # fmt: skip
    assert len({t.marker.symbol for t in modes.data}) == len({t.line.color for t in modes.data}) == 3


def test_steps_get_whole_number_ticks_and_every_axis_a_title():
    fig = figures.episode_scores_figure({"naive": [0, 10, 10], "memory": [5, 5]})
    assert (fig.layout.xaxis.tickmode, fig.layout.xaxis.tick0, fig.layout.xaxis.dtick) == ("linear", 1, 1)
    assert fig.layout.xaxis.title.text == "step" and fig.layout.yaxis.title.text == "score (−100 … 100)"
    assert list(fig.layout.yaxis.range) == [-105, 105]  # equal scores are not blown up to ±1
    long = figures.metrics_figure([{"iteration": i, "loss/policy": 0.1} for i in range(1, 41)], ["loss/policy"], "Losses")
    assert long.layout.xaxis.dtick == 4  # 39 iterations apart: a tick every ceil(39 / 10)
    for fig in figures.train_figures([{"iteration": 1, "kind": "train", "rollout/score_mean": 1.0, "loss/policy": 0.1,
                                       "ratio/clip_frac_low": 0.1, "mask/low_prob_frac": 0.2, "memory/tips_total": 3}]):  # fmt: skip
        assert fig.layout.xaxis.title.text == "iteration" and fig.layout.yaxis.title.text


def test_rates_are_drawn_in_percent():
    rows = [{"iteration": 1, "rollout/success_rate": 0.25, "mask/low_prob_frac": 0.5, "rollout/score_mean": -40.0}]
    fig = figures.compare_runs_figure({"a": rows}, "rollout/success_rate")
    assert list(fig.data[0].y) == [25.0] and fig.layout.yaxis.title.text == "rollout/success_rate (%)"
    assert list(figures.compare_runs_figure({"a": rows}, "rollout/score_mean").data[0].y) == [-40.0]
    masked = figures.train_figures([{**rows[0], "kind": "train"}])[3]
    assert list(masked.data[0].y) == [50.0] and masked.layout.yaxis.title.text == "tokens masked (%)"
    assert list(masked.layout.yaxis.range) == [0, pytest.approx(57.5)]  # a % axis starts at 0, with room above the top point
    none_clipped = figures.train_figures([{"iteration": 1, "kind": "train", "ratio/clip_frac_low": 0.0}])[2]
    assert list(none_clipped.layout.yaxis.range) == [0, 5.0]  # not −1 … 1 around a 0 %


def test_one_tip_retrieved_is_singular():
    step = Step(index=0, user_message="u", tips=(RetrievedTip("t1", "go to the kitchen", 100.0, 0.9),),
                valid_actions=("look",), sample=ActionSample("look", (1,), (-0.1,)), action="look",
                corrected=False, reward=0.0, score=0.0, observation="o")  # fmt: skip
    assert "1 tip retrieved" in render.step_html(step, "memory")
    assert "2 tips retrieved" in render.step_html(replace(step, tips=step.tips * 2), "memory")


def test_compare_a_count_metric_gets_whole_ticks_and_a_legend_for_one_run():
    """distill/episodes 15, 16, 17: ticks every 1 (not 15, 15.5, …), and the run named in a legend."""
    rows = [{"iteration": i + 1, "distill/episodes": float(n)} for i, n in enumerate((15, 16, 17))]
    fig = figures.compare_runs_figure({"studio": rows}, "distill/episodes")
    assert (fig.layout.yaxis.tickmode, fig.layout.yaxis.dtick, fig.layout.yaxis.tickformat) == ("linear", 1, "d")
    assert fig.layout.showlegend is True and fig.data[0].name == "studio"
    # steps 1, 2, 5, 10, 20, 50, …: at most about 5 steps over the span
    assert [figures.whole_tick_step(s) for s in (0, 2, 5, 6, 12, 30, 200, 1000)] == [1, 1, 1, 2, 5, 10, 50, 200]
    # a fractional metric keeps plotly's own ticks
    frac = figures.compare_runs_figure({"studio": [{"iteration": 1, "loss/policy": 0.25}]}, "loss/policy")
    assert frac.layout.yaxis.dtick is None
