"""The Lesson's and the Race's plotly figures as dicts: styles per arm, units, ticks, empty charts
(the other tabs' figures: tests/test_app_figures.py)."""

from __future__ import annotations

from empo2_studio.app import charts


def _rows(successes):
    return [{"iteration": i + 1, "rollout/success_rate": s, "rollout/score_mean": 100 * s - 50} for i, s in enumerate(successes)]


def _annotations(fig) -> list[str]:
    return [a["text"] for a in fig.to_dict()["layout"].get("annotations", ())]


def test_race_arms_differ_in_colour_marker_and_dash_and_rates_are_percent():
    same = _rows([0.5, 0.5, 1.0])  # identical arms: the lines coincide
    fig = charts.race_figure({"EMPO2": same, "GRPO": same}, {"EMPO2": "EMPO²", "GRPO": "GRPO"}).to_dict()
    traces = fig["data"]
    assert len(traces) == 4 and [t["name"] for t in traces] == ["EMPO²", "EMPO²", "GRPO", "GRPO"]
    empo2, grpo = traces[0], traces[2]
    assert empo2["line"]["color"] != grpo["line"]["color"]
    assert empo2["marker"]["symbol"] != grpo["marker"]["symbol"] and grpo["marker"]["symbol"].endswith("-open")
    assert grpo["marker"]["size"] > empo2["marker"]["size"]  # the open square rings the dot when they coincide
    assert empo2["line"]["dash"] != grpo["line"]["dash"]
    assert list(empo2["y"]) == list(grpo["y"]) == [50.0, 50.0, 100.0]  # success in %, not 0 … 1
    layout = fig["layout"]
    assert layout["yaxis"]["ticksuffix"] == "%" and layout["yaxis"]["range"] == [-5, 115]
    assert layout["yaxis"]["title"]["text"] == "training success (%)"
    assert layout["yaxis2"]["title"]["text"].startswith("training score") and layout["yaxis2"]["range"] == [-105, 105]
    assert layout["xaxis"]["title"]["text"] == layout["xaxis2"]["title"]["text"] == "iteration"
    assert layout["xaxis"]["dtick"] == layout["xaxis2"]["dtick"] == 1 and layout["xaxis"]["tick0"] == 1
    assert _annotations(charts.race_figure({"EMPO2": same})) == []  # no subplot title under the chart title


def test_race_evaluations_average_the_seeds_and_band_their_spread():
    # two seeds of training rows (the same iterations): the lines are their means
    rows = {"EMPO2": [*_rows([0.0, 0.5]), *_rows([1.0, 0.5])], "GRPO": _rows([0.0, 0.0])}
    evals = {
        "EMPO2": [{"iteration": 0, "eval/success_rate": 0.0, "seed": 0}, {"iteration": 0, "eval/success_rate": 0.0, "seed": 1},
                  {"iteration": 10, "eval/success_rate": 0.25, "seed": 0}, {"iteration": 10, "eval/success_rate": 0.75, "seed": 1}],
        "GRPO": [{"iteration": 0, "eval/success_rate": 0.0, "seed": 0}, {"iteration": 10, "eval/success_rate": 0.125, "seed": 0}],
    }
    fig = charts.race_figure(rows, {"EMPO2": "EMPO²"}, evals).to_dict()
    by_axis = {}
    for t in fig["data"]:
        by_axis.setdefault(t.get("xaxis", "x"), []).append(t)
    assert [list(t["y"]) for t in by_axis["x"]] == [[50.0, 50.0], [0.0, 0.0]]  # EMPO² (0+100)/2, (50+50)/2
    empo2_band, empo2_eval, grpo_eval = by_axis["x3"]  # one seed of GRPO: no band
    assert empo2_band["fill"] == "toself" and list(empo2_band["y"]) == [0.0, 75.0, 25.0, 0.0]  # highest, then lowest back
    assert list(empo2_band["x"]) == [0, 10, 10, 0] and empo2_band["showlegend"] is False
    assert list(empo2_eval["y"]) == [0.0, 50.0] and list(grpo_eval["y"]) == [0.0, 12.5]
    assert fig["layout"]["yaxis3"]["title"]["text"] == "test success, no memory (%)"
    assert fig["layout"]["yaxis3"]["ticksuffix"] == "%"


def test_empty_charts_say_no_data_yet():
    empties = [charts.race_figure({}), charts.race_figure({"EMPO2": [], "GRPO": []}), charts.lesson_figure([]),
               charts.race_figure({}, evals={})]
    for fig in empties:
        assert _annotations(fig) == ["no data yet"], fig.layout.title.text
        assert fig.to_dict()["layout"]["xaxis"]["showticklabels"] is False
    assert _annotations(charts.race_figure({"EMPO2": _rows([0.0])})) == []


def test_lesson_chart_is_percent_with_stage_titles():
    bars = [{"stage": "naive", "title": "1 · naive", "success_rate": 0.0, "successes": 0, "episodes": 16, "mean_score": -40.0},
            {"stage": "memory", "title": "3 · with tips", "success_rate": 0.9375, "successes": 15, "episodes": 16, "mean_score": 90.0}]
    fig = charts.lesson_figure(bars).to_dict()
    bar = fig["data"][0]
    # each bar spans -4 … its rate: the 0 % bar is a stub 4 points tall, not a bar of height 0
    assert bar["base"] == -4.0 and list(bar["y"]) == [4.0, 97.75] and list(bar["customdata"]) == [0.0, 93.75]
    assert [bar["base"] + h for h in bar["y"]] == [0.0, 93.75] and bar["text"][1] == "15/16 won · score 90"
    assert fig["layout"]["yaxis"]["ticksuffix"] == "%" and fig["layout"]["yaxis"]["title"]["text"] == "success rate (%)"
    assert fig["data"][0]["marker"]["color"][0] != fig["data"][0]["marker"]["color"][1]


def test_base_rate_curve_means_seeds_per_rate_and_draws_the_gain_in_points():
    points = [
        {"base_rate": 0.0, "seed": 0, "EMPO2": 0.75, "GRPO": 0.0},
        {"base_rate": 0.0, "seed": 1, "EMPO2": 0.25, "GRPO": 0.0},
        {"base_rate": 0.3, "seed": 0, "EMPO2": 0.5, "GRPO": 0.75},
    ]
    fig = charts.base_rate_figure(points).to_dict()
    named = {(t["name"], t["mode"]): t for t in fig["data"]}
    empo2 = named[("EMPO²", "lines+markers")]
    assert list(empo2["x"]) == [0.0, 30.0] and list(empo2["y"]) == [50.0, 50.0]  # (75+25)/2; one seed at 30 %
    assert list(named[("GRPO", "lines+markers")]["y"]) == [0.0, 75.0]
    gain = named[("EMPO² − GRPO", "lines+markers")]
    assert gain["xaxis"] == "x2" and list(gain["y"]) == [50.0, -25.0]  # 50 − 0; 50 − 75
    seeds = named[("EMPO² − GRPO, one seed", "markers")]
    assert list(seeds["y"]) == [75.0, 25.0, -25.0] and list(seeds["customdata"]) == [0, 1, 0]
    layout = fig["layout"]
    assert layout["yaxis"]["ticksuffix"] == "%" and layout["yaxis2"]["range"] == [-105, 105]
    assert layout["xaxis"]["ticksuffix"] == "%"
    assert _annotations(charts.base_rate_figure([])) == [charts.EMPTY_TEXT]
