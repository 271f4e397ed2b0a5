"""A third environment needs no edit in memory/ or policy/: a tiny env defined here plays through the
rollout, has the policy reflect on its episodes, and its own summary hook leads the stored tips."""

from __future__ import annotations

from pathlib import Path

from empo2_studio.config import MemoryConfig
from empo2_studio.memory import TipStore, make_embedder
from empo2_studio.memory.reflection import OWN_NOTE_PREFIX
from empo2_studio.rollout import conversation, play_group, seed_policy, write_group_tips
from empo2_studio.types import Episode, Observation, StepResult
from fakes import ScriptedPolicy

PACKAGE = Path(__file__).resolve().parents[1] / "empo2_studio"


class LampEnv:
    """Two rooms; the lamp is in the attic; "switch on lamp" there wins (+100)."""

    name = "lamp"

    def __init__(self) -> None:
        self.room, self.steps, self.done = "cellar", 0, False

    def task_names(self) -> tuple[str, ...]:
        return ("lamp-on",)

    def variations(self, task: str, split: str) -> tuple[int, ...]:
        return (0,)

    def step_limit(self, task: str) -> int:
        return 3

    def fewshot_examples(self, task: str) -> tuple[str, ...]:
        return ()

    def _obs(self, text: str, score: float = 0.0) -> Observation:
        actions = ("climb up", "switch on lamp") if self.room == "attic" else ("climb up", "wait")
        return Observation(text, "lamp-on", 0, "Switch on the lamp.", () if self.done else actions, score=score)

    def reset(self, task: str, variation: int) -> Observation:
        self.room, self.steps, self.done = "cellar", 0, False
        return self._obs("A dark cellar. A ladder goes up.")

    def step(self, action_text: str) -> StepResult:
        self.steps += 1
        won = action_text == "switch on lamp" and self.room == "attic"
        if action_text == "climb up":
            self.room = "attic"
        self.done = won or self.steps >= 3
        obs = self._obs(f"You are in the {self.room}.", 100.0 if won else 0.0)
        return StepResult(obs, 100.0 if won else 0.0, self.done, won, action_text, action_text, False)

    def close(self) -> None:
        pass

    def summarise_episode(self, episode: Episode) -> str | None:
        went = any(s.action == "climb up" for s in episode.steps)
        return f"[lamp log] {episode.task_description} The attic was {'reached' if went else 'never reached'}."


def test_a_new_env_plays_reflects_and_summarises_with_no_edit_outside_envs(tmp_path):
    store = TipStore.open(tmp_path / "tips.lance", make_embedder("hash"),
                          MemoryConfig(embedder="hash", similarity_threshold=-1.0))  # fmt: skip
    policy = ScriptedPolicy(script=lambda req: "climb up" if len(req.turns) == 1 else "switch on lamp")
    seed_policy(policy, 0)
    kw = dict(task="lamp-on", variation=0, split="train", update_mode=None, temperature=1.0, seed=0)
    naive = play_group([LampEnv(), LampEnv()], policy, None, rollout_mode="naive", **kw)
    assert [ep.won for ep in naive] == [True, True] and naive[0].task_description == "Switch on the lamp."
    assert naive[0].prompt_style == "paper"  # an env not in envs.PROMPT_STYLES gets the paper's prompt
    assert naive[0].record == "[lamp log] Switch on the lamp. The attic was reached."
    assert naive[0].first_observation == "A dark cellar. A ladder goes up."
    tipped = write_group_tips(policy, store, naive)
    assert tipped[0].tip == f"{OWN_NOTE_PREFIX} tip 0: try what raised the score [lamp log] Switch on the lamp. The attic was reached."
    memory = play_group([LampEnv()], policy, store, rollout_mode="memory", **kw)
    first = [r for batch in policy.calls for r in batch if r.key == memory[0].episode_id][0]
    assert "<tip> " in first.turns[-1].user_text and "[lamp log] Switch on the lamp." in first.turns[-1].user_text
    assert conversation(memory[0])[0].user_text == first.turns[-1].user_text


def test_memory_names_no_environment():
    """Environment names and room text stay in envs/: memory/ never mentions them."""
    words = ("trap", "scienceworld", "This room is called", "Doors lead to")
    found = [
        f"{path.relative_to(PACKAGE.parent)}: {w!r}"
        for path in sorted((PACKAGE / "memory").rglob("*.py"))
        for w in words
        if w in path.read_text(encoding="utf-8")
    ]
    assert found == []
