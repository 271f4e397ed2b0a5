"""The Lesson tab's form: picked variations, the settings they make, the tip boxes and each task's
defaults (`lesson.lesson_defaults`). Plain functions: form values in, values or Gradio updates out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gradio as gr

from empo2_studio.app.handlers import whole_number
from empo2_studio.lesson import LESSON_TASKS, TRAP_TASKS, LessonSettings, curated_tips, lesson_defaults, train_variations

MAX_TIP_BOXES = 10
"""At most this many variations per lesson (one editable tip box each; ScienceWorld's default has 8)."""
BOXES_PER_ROW = 5


def parse_variations(value: Any) -> tuple[int, ...]:
    """The picked variations as ints (a list from the dropdown, or "0, 1" text)."""
    if value is None or value == "":
        return ()
    items = value if isinstance(value, (list, tuple)) else str(value).replace(",", " ").split()
    out = []
    for item in items:
        try:
            out.append(int(str(item).split("·")[0].strip()))
        except ValueError:
            raise ValueError(f"variations must be whole numbers, got {item!r}") from None
    return tuple(out)


def settings_from_form(task: str, variations: Any, episodes: Any, distill_steps: Any) -> LessonSettings:
    """Validated `LessonSettings` from the form; ValueError names a bad value."""
    vs = parse_variations(variations)
    if len(vs) > MAX_TIP_BOXES:
        raise ValueError(f"the lesson plays at most {MAX_TIP_BOXES} variations at once, got {len(vs)}")
    return LessonSettings(task=task, variations=vs, episodes=whole_number(episodes, "episodes per variation"),
                          distill_steps=whole_number(distill_steps, "distill steps")).validate()  # fmt: skip


def tip_boxes(task: str | None, variations: Any) -> list[Any]:
    """One update per tip box: visible and pre-filled with `curated_tip` for each picked variation."""
    try:
        vs = parse_variations(variations)[:MAX_TIP_BOXES]
    except ValueError:
        vs = ()
    tips = curated_tips(task, vs) if task in LESSON_TASKS else []
    out = []
    for i in range(MAX_TIP_BOXES):
        if i < len(tips):
            out.append(gr.Textbox(value=tips[i], label=f"Tip for variation {vs[i]}", visible=True))
        else:
            out.append(gr.Textbox(value="", visible=False))
    return out


def tips_from_boxes(variations: Sequence[int], texts: Sequence[Any]) -> dict[int, str]:
    """variation → the text of its box (what the user edited is what gets stored)."""
    return {v: str(texts[i] or "") for i, v in enumerate(variations)}


def task_defaults(task: str | None) -> tuple[Any, Any]:
    """Task picked: the variations dropdown offers its train variations, set to its default lesson
    (`lesson_defaults`), and the episodes per variation to the default's."""
    d = lesson_defaults(task if task in LESSON_TASKS else TRAP_TASKS[0])
    choices = [str(v) for v in train_variations(d.task)]
    return (gr.Dropdown(choices=choices, value=[str(v) for v in d.variations], multiselect=True),
            gr.Number(value=d.episodes))  # fmt: skip
