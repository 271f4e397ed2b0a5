"""The shared nouns of empo2-studio: plain, frozen dataclasses that import no torch.

Every module speaks in these types: environments produce `Observation`/`StepResult`, the policy
produces `ActionSample`, the rollout assembles `Step`/`Episode`/`EpisodeGroup`, the memory stores
`Tip`. Scores are on ScienceWorld's scale everywhere: −100 (failed) … 0 … 100 (task complete).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

EnvName = Literal["trap", "scienceworld"]
"""Which text environment: the pure-Python exploration trap, or the ScienceWorld simulator."""

Split = Literal["train", "dev", "test"]
"""Variation split, as defined by each environment."""

RolloutMode = Literal["naive", "memory"]
"""How an action is sampled: from the plain prompt, or with retrieved tips in the prompt (paper §4.2)."""

UpdateMode = Literal["on-policy", "on-policy-with-tips", "off-policy"]
"""How a training episode is learned from (paper §4.2 / App. C):
on-policy: naive rollout, scored on the same prompt;
on-policy-with-tips: memory rollout, scored on the same prompt (tips kept);
off-policy: memory rollout, scored on the tip-free prompt (reward-guided self-distillation)."""

Decoding = Literal["free", "constrained", "action"]
"""free: free text, mapped to the nearest valid action by the env; constrained: sampling restricted
token by token to the prefix tree of the step's valid actions; action: one whole valid action drawn
from a categorical over them, scored by the free model (`policy.choice`)."""

PromptStyle = Literal["paper", "compact"]
"""How the policy's chat is laid out (`policy.prompts`): the paper's appendix prompt, or the short one
whose notes sit right before the answer. Each environment names its own (`envs.PROMPT_STYLES`)."""

TipOrigin = Literal["generated", "manual", "imported"]
"""Where a tip came from: written by the policy, added or edited by hand, or imported from JSONL."""

NoteContext = Literal["auto", "episode", "observation"]
"""What a tip is written after: the whole episode (paper §2), or each observation alone, the notes joined
(`memory.reflection.write_observation_notes`); auto: what the note writer was trained on
(`policy.note_writer.note_context`)."""

MemoryStructure = Literal["flat", "structured", "groups", "flat-counts", "structured-random", "flat-counts-wins", "flat-rotate",
                          "flat-rotate-source"]
"""How the tip memory is organised: one list per variation ranked by score (paper §2), or groups by task
and place with used/helped counts, merges and a cap per group (`memory.structure`, docs/memory-structure.md);
the rest are issue 49's experiment arms and variants measured on ScienceWorld's search (`memory.structure.ARMS`)."""

WIN_SCORE = 100.0
"""The top of the −100 … 100 score scale every environment reports on: an episode that reaches it won."""

# Each choice set is written once, as the Literal above; these tuples are read from it.
ENV_NAMES: tuple[EnvName, ...] = get_args(EnvName)
SPLITS: tuple[Split, ...] = get_args(Split)
UPDATE_MODES: tuple[UpdateMode, ...] = get_args(UpdateMode)
"""In `rollout/update_mode` code order: 0 on-policy, 1 on-policy-with-tips, 2 off-policy."""
DECODINGS: tuple[Decoding, ...] = get_args(Decoding)
TIP_ORIGINS: tuple[TipOrigin, ...] = get_args(TipOrigin)
NOTE_CONTEXTS: tuple[NoteContext, ...] = get_args(NoteContext)
MEMORY_STRUCTURES: tuple[MemoryStructure, ...] = get_args(MemoryStructure)


def rollout_mode_of(update_mode: UpdateMode) -> RolloutMode:
    """The rollout prompt an update mode samples with: only plain on-policy runs without tips."""
    return "naive" if update_mode == "on-policy" else "memory"


@dataclass(frozen=True, slots=True)
class Observation:
    """What the agent sees before acting."""

    text: str
    """The environment's text after the last action (after reset: the first look around)."""
    task: str
    """Task name, e.g. "power-component" or "trap-light-bulb"."""
    variation: int
    """Variation index within the task."""
    task_description: str
    """The task instruction given to the agent."""
    valid_actions: tuple[str, ...]
    """Every action the environment accepts now (sorted, deduplicated)."""
    inventory: str = ""
    """The agent's inventory as text ("" when the env has none)."""
    score: float = 0.0
    """Running score, −100 … 100."""


@dataclass(frozen=True, slots=True)
class StepResult:
    """The outcome of one `TextEnv.step`."""

    observation: Observation
    """The observation after the action."""
    reward: float
    """Change in score caused by the action (ScienceWorld points)."""
    done: bool
    """The episode has ended (task complete, task failed, or step limit reached)."""
    won: bool
    """The score reached 100."""
    action_text: str
    """What the agent sent, verbatim."""
    action: str
    """The action executed after correction to the closest valid action ("" if none was executed)."""
    corrected: bool
    """True when `action` differs from the stripped `action_text`."""
    invalid: bool = False
    """True when the text could not be mapped to any action (empty or whitespace); nothing was executed."""


@dataclass(frozen=True, slots=True)
class RetrievedTip:
    """A tip shown to the agent at one step, with why it was picked."""

    tip_id: str
    text: str
    """The stored content (tip + the step's action + the episode score)."""
    score: float
    """The score of the episode that wrote it (−100 … 100); retrieval orders by this."""
    similarity: float
    """Cosine similarity between the step's conversation and the tip's key (−1 … 1)."""
    pinned: bool = False
    """A curated tip, shown at every step of its task and variation (`MemoryConfig.pin_curated`)."""
    why: str = ""
    """Why a structured memory chose it: its group, rank and used/helped counts ("" for a flat memory)."""


@dataclass(frozen=True, slots=True)
class SkippedTip:
    """A tip of the step's partition that was not shown, and why (the Episodes view lists these)."""

    tip_id: str
    text: str
    score: float
    similarity: float
    """Cosine similarity between the step's conversation and the tip's key (−1 … 1)."""
    reason: str
    """"disabled", "similarity 0.42 ≤ threshold 0.50", "outside the top 10 (score 25.0)" or, in a compact
    prompt, "a compact prompt shows the best-scored note only (score 25.0)" or "a curated tip is pinned:
    only curated tips are shown"."""


@dataclass(frozen=True, slots=True)
class ActionSample:
    """One sampled action, kept as the exact tokens the policy produced."""

    text: str
    """Decoded text of `token_ids` (stripped of the end-of-line / end-of-turn marker)."""
    token_ids: tuple[int, ...]
    """The sampled token ids, including the terminating token when one was sampled."""
    logprobs: tuple[float, ...]
    """Behaviour log-prob of each sampled token, same length as `token_ids`. In constrained decoding
    these are log-probs of the renormalised (masked) distribution; in action decoding it is ONE value,
    the log-prob of the whole action in the step's categorical (`policy.choice`)."""


@dataclass(frozen=True, slots=True)
class Step:
    """One turn of an episode: what the agent saw, sampled and did."""

    index: int
    """0-based turn index."""
    user_message: str
    """The user turn the action answers, without tips (step 0 holds the instructions, few-shot
    examples and task). The with-tips variant is this text plus the tips block rendered from `tips`."""
    tips: tuple[RetrievedTip, ...]
    """Tips appended to this turn's user message when sampling (empty for naive rollouts)."""
    valid_actions: tuple[str, ...]
    """Valid actions at sampling time; constrained scoring rebuilds its masks from these."""
    sample: ActionSample
    """What the policy produced."""
    action: str
    """The action the environment executed."""
    corrected: bool
    """The executed action differs from the sampled text."""
    reward: float
    """Extrinsic reward (score change)."""
    score: float
    """Running score after the step (−100 … 100)."""
    observation: str
    """The environment's text after the step."""
    intrinsic_reward: float = 0.0
    """Novelty bonus earned by the state this step reached (paper §4.3); 0 when disabled."""
    skipped_tips: tuple[SkippedTip, ...] = ()
    """Memory steps: the nearest tips of the partition that were not shown, with the reason."""


@dataclass(frozen=True, slots=True)
class Episode:
    """One played episode, complete enough to be rescored, replayed in the UI and trained on."""

    episode_id: str
    env: EnvName
    task: str
    variation: int
    split: Split
    rollout_mode: RolloutMode
    """naive (no tips) or memory (tips retrieved at every step)."""
    update_mode: UpdateMode | None
    """How a trainer learns from it; None for evaluation, demo and adaptation episodes."""
    decoding: Decoding
    temperature: float
    seed: int
    steps: tuple[Step, ...]
    score: float
    """Final score (−100 … 100): the env's running score after the last step (not the return, see
    `return_`)."""
    won: bool
    policy_version: str = "base"
    """Which weights played it: "base", the loaded adapter's folder name ("warm-start", …) or, after a
    training update, the iteration whose checkpoint would hold them ("iter_000012")."""
    group_id: str = ""
    """The GRPO group it belongs to ("" outside training)."""
    tip: str | None = None
    """The tip the policy wrote about this episode, if any."""
    created_at: float = 0.0
    """Unix time when the episode finished."""
    task_description: str = ""
    """The task instruction the agent was given (`Observation.task_description` at reset)."""
    prompt_style: PromptStyle = "paper"
    """The prompt style it was played in; every rebuild of its conversation uses this one."""
    first_observation: str = ""
    """The environment's text at reset (what the agent saw before its first action)."""
    record: str = ""
    """The environment's summary of the episode (`TextEnv.summarise_episode`, e.g. the trap's
    "[from the record] …" line); "" when the environment gives none."""

    @property
    def return_(self) -> float:
        """Extrinsic return, what group advantages compare: the sum of the step rewards, i.e. the final
        `score` minus the score the episode started at (−200 … 200 score points). It equals the final
        score only when the start is 0 (every trap task): ScienceWorld's `find-living-thing` starts at
        8, so a final 25 is a return of 17, and a wrong focus (score −100) is a reward of −108. All
        episodes of a group start at the same score, so their standardised advantages are the same as
        if the final scores were compared."""
        return sum(s.reward for s in self.steps)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Episode:
        steps = tuple(
            Step(
                **{
                    **s,
                    "tips": tuple(RetrievedTip(**t) for t in s["tips"]),
                    "skipped_tips": tuple(SkippedTip(**t) for t in s.get("skipped_tips", ())),
                    "valid_actions": tuple(s["valid_actions"]),
                    "sample": ActionSample(
                        text=s["sample"]["text"],
                        token_ids=tuple(s["sample"]["token_ids"]),
                        logprobs=tuple(s["sample"]["logprobs"]),
                    ),
                }
            )
            for s in d["steps"]
        )
        if "prompt_style" not in d:  # saved before episodes carried it: trap episodes were compact
            d = {**d, "prompt_style": "compact" if d.get("env") == "trap" else "paper"}
        return Episode(**{**d, "steps": steps})


@dataclass(frozen=True, slots=True)
class EpisodeGroup:
    """The N episodes of one task variation played together in one iteration (the GRPO group)."""

    group_id: str
    task: str
    variation: int
    update_mode: UpdateMode
    episodes: tuple[Episode, ...]


@dataclass(frozen=True, slots=True)
class Tip:
    """One row of the tip memory (paper §2 / Listing 1)."""

    tip_id: str
    task: str
    variation: int
    text: str
    """The tip content shown to the agent."""
    action: str = ""
    """The action taken at the step this entry belongs to ("" for manual tips)."""
    score: float = 0.0
    """Score of the source episode (−100 … 100); retrieval orders by it."""
    source_episode_id: str = ""
    created_at: float = 0.0
    origin: TipOrigin = "generated"
    enabled: bool = True
    edited: bool = False


@dataclass(frozen=True, slots=True)
class IterationReport:
    """What one trainer iteration (or distillation / evaluation pass) returns."""

    iteration: int
    update_mode: UpdateMode | None
    metrics: dict[str, float] = field(default_factory=dict)
    """Flat, namespaced metrics (`rollout/…`, `loss/…`, `ratio/…`, `mask/…`, `memory/…`, `time/…`)."""
    episode_ids: tuple[str, ...] = ()
    skipped_update: bool = False
    """True when the non-finite guard skipped the optimizer step."""
