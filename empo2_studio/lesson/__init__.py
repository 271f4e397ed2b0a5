"""The Lesson: the one phenomenon the studio exists to teach, as five short stages on the trap env
or on ScienceWorld's find-animal (`lesson.scienceworld`).

An agent stuck in an exploration trap (it focuses on the look-alike it can see and fails) is rescued
by its notes (a curated tip saying where the target is), and distillation moves what the notes taught
into its weights, so the naive agent, without any tip, succeeds too: 1 naive → 2 curated tips →
3 with tips → 4 distill → 5 naive again (paper §4.2: off-policy updates learn tip-free what was done
with tips).

- `lesson.results`: the settings, the per-stage results and the metrics rows they are recorded as;
- `lesson.stages`:  `Lesson`, which runs the stages on a trap session's trainer;
- `lesson.timing`:  elapsed and expected time from the times measured on this machine.
"""

from empo2_studio.lesson.results import (
    LESSON_TASKS, PLAY_STAGES, SCIENCEWORLD_LESSON_TASKS, STAGE_TITLES, STAGES, TIP_SCORE, TRAP_TASKS, LessonSettings,
    StageResult, VariationRow, curated_tip, curated_tips, lesson_defaults, lesson_env, metrics_row, results_from_metrics, split_of,
    train_variations, variation_row,
)  # fmt: skip
from empo2_studio.lesson.stages import Lesson, OnPartial, Progress
from empo2_studio.lesson.timing import (
    Countdown, lesson_countdown, lesson_seconds, minutes_text, rates_from_metrics, rates_note,
)  # fmt: skip

__all__ = [
    "LESSON_TASKS", "PLAY_STAGES", "SCIENCEWORLD_LESSON_TASKS", "STAGES", "STAGE_TITLES", "TIP_SCORE", "TRAP_TASKS", "Countdown", "Lesson", "LessonSettings",
    "OnPartial", "Progress", "StageResult", "VariationRow", "curated_tip", "curated_tips", "lesson_countdown", "lesson_defaults", "lesson_env", "lesson_seconds", "metrics_row",
    "minutes_text", "rates_from_metrics", "rates_note", "results_from_metrics", "split_of", "train_variations", "variation_row",
]  # fmt: skip
