"""The LLM agent: prompts, batched/cached sampling, exact packed log-prob scoring, LoRA adapters.

The rollout and the trainer talk to the policy only through the request types and the `Policy`
protocol below, in token ids for everything the policy produced: a past action is never decoded
and re-encoded. A conversation is a sequence of turns; each turn is a user message (rendered text,
with or without the tips block) answered by the exact sampled action token ids.

Temperature rule (as in the recipe, verl): the behaviour policy is the *tempered* distribution
softmax(logits / T) that the action was sampled from, and training re-scores with the same T, so the
importance ratio's numerator and denominator are the same distribution at the same temperature and
equal exactly (float rounding) before an update. Greedy decoding (T = 0) records and scores the
log-probs at T = 1 (`logprob_temperature`). The temperature of every episode is stored in
`Episode.temperature`; `update.policy_update` passes it to `Policy.score`.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, Sequence

from empo2_studio.types import ActionSample, Decoding

# On an AVX512-BF16 CPU, importing bitsandbytes looks on the Hugging Face Hub for an optional 4-bit CPU
# kernel and, offline, logs two warnings that read as errors. The policy never uses it (float32 on CPU).
for _logger in ("bitsandbytes.backends.cpu.ops", "kernels"):
    logging.getLogger(_logger).setLevel(logging.ERROR)
# peft asks transformers a deprecated question on every LoRA wrap, and looks for the base model's config on
# the Hub when it saves an adapter of the embedded model (whose vocabulary is unchanged): noise to a user.
warnings.filterwarnings("ignore", message=r"`is_gradient_checkpointing` is deprecated", category=FutureWarning)
warnings.filterwarnings("ignore", message=r"Could not find a config file in ", category=UserWarning)

if TYPE_CHECKING:  # torch is imported only by the implementation
    import torch


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn of a conversation.

    `user_text` is the full user message as the model saw it (tips block included when tips were
    used). `action_ids` are the exact tokens sampled in reply (None for the turn awaiting an action).
    `valid_actions` are the step's valid actions; in constrained decoding they define the masks.
    """

    user_text: str
    action_ids: tuple[int, ...] | None
    valid_actions: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ActionRequest:
    """Ask for the next action of one episode.

    `key` identifies the episode across calls so its KV cache can be reused; `turns[-1]` is the
    turn awaiting an action (its `action_ids` is None), earlier turns are the history.
    """

    key: str
    turns: tuple[Turn, ...]


def logprob_temperature(temperature: float) -> float:
    """The temperature log-probs are taken at for a sampling temperature: T itself, 1 for greedy (T = 0).

    Raises ValueError for a negative or non-finite temperature (or a bool / non-number).
    """
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature < float("inf"):
        raise ValueError(f"temperature must be a finite number ≥ 0 (0 = greedy), got {temperature!r}")
    return float(temperature) if temperature > 0 else 1.0


def instruction_list(
    instruction: str | Sequence[str], conversations: Sequence[Sequence[Turn]], keys: Sequence[str] | None = None
) -> list[str]:
    """The instruction of each conversation in a `Policy.write_tips` call: `instruction` repeated when it
    is one text, else the list itself. Raises ValueError on an empty batch, or a `keys` or instruction
    list of another length than `conversations`."""
    if not conversations:
        raise ValueError("write_tips() needs at least one conversation, got an empty batch")
    if keys is not None and len(keys) != len(conversations):
        raise ValueError(f"write_tips() got {len(keys)} keys for {len(conversations)} conversations")
    if isinstance(instruction, str):
        return [instruction] * len(conversations)
    if len(instruction) != len(conversations):
        raise ValueError(f"write_tips() got {len(instruction)} instructions for {len(conversations)} conversations")
    return list(instruction)


class Policy(Protocol):
    decoding: Decoding
    """"free" or "constrained" (see types.Decoding)."""
    version: str
    """"base" or the name of the loaded adapter / checkpoint."""
    generator: torch.Generator
    """The sampler's random generator; `rollout.seed_policy` seeds it (sampling never reads torch's
    global RNG)."""
    chat_format: Any
    """A `policy.tokens.ChatFormat` (not imported here: tokens imports this module's `Turn`): how turns
    become token ids (`packed`, `conversation_ids`, `turn_prompt_ids`); the update counts the length
    limit with it."""

    def sample(self, requests: Sequence[ActionRequest], *, temperature: float) -> list[ActionSample]:
        """Sample the next action for every request in one batched call.

        Returns one ActionSample per request with the sampled token ids (≤ max_action_tokens,
        stopping at end-of-line or EOS) and the behaviour log-prob of each token under
        softmax(logits / temperature) (T = 1 when greedy, see `logprob_temperature`). Raises ValueError
        on an empty batch or a request whose last turn already has an action.
        """
        ...

    def forget(self, key: str) -> None:
        """Drop the cached state (KV cache) kept for episode `key`."""
        ...

    def score(
        self, conversations: Sequence[Sequence[Turn]], *, temperature: float | Sequence[float] = 1.0
    ) -> list[list[torch.Tensor]]:
        """Per-token log-probs of every turn's `action_ids` under its conversation, packed.

        `temperature`: the sampling temperature of all conversations, or one per conversation; the
        log-probs are those of softmax(logits / T) (T = 0 scores at 1, like greedy sampling).
        Returns, per conversation, one 1-D tensor per turn of shape (len(action_ids),); gradients
        flow to the LoRA parameters when grad is enabled. Constrained decoding applies the same
        masks as sampling (rebuilt from `valid_actions`), so a re-score of sampled tokens with
        unchanged weights at the sampling temperature equals the behaviour log-probs.
        Raises ValueError on an empty batch, an unanswered turn, a bad temperature or a temperature
        list of another length.
        """
        ...

    def write_tips(
        self, conversations: Sequence[Sequence[Turn]], instruction: str | Sequence[str], *,
        keys: Sequence[str] | None = None,
    ) -> list[str]:  # fmt: skip
        """Let the policy summarise each finished conversation in one line (the reflection step).
        `instruction`: one for all, or one per conversation (`instruction_list`).
        `keys`: the episodes' sampling keys, so a kept KV cache is reused (then dropped)."""
        ...

    def no_adapter(self) -> AbstractContextManager[None]:
        """Inside this context the policy scores with the adapter-free base model (the KL reference)."""
        ...

    def trainable_parameters(self) -> list[Any]:
        """The LoRA parameters the optimizer updates."""
        ...

    def save_adapter(self, path: str) -> None:
        """Save the LoRA adapter as a PEFT directory."""
        ...

    def load_adapter(self, path: str) -> None:
        """Load a PEFT adapter directory; raises ValueError if it was saved for another base model."""
        ...


_LAZY = {
    "load_policy": "empo2_studio.policy.loading",
    "build_tiny_policy": "empo2_studio.policy.loading",
    "HFPolicy": "empo2_studio.policy.hf_policy",
}


def __getattr__(name: str) -> Any:
    # The implementation imports torch; keep `import empo2_studio.policy` light for the protocol users.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
