"""A torch-free scripted policy for tests that exercise the rollout / memory loop, not the model.

`ScriptedPolicy` has the members of `empo2_studio.policy.Policy` that rollout, reflection and the
studio call, with outcomes fixed in advance: every token of an action has log-prob `logprob`, token
ids are the action's UTF-8 bytes, and the action is `script(request)` (default: a valid action drawn
by a `random.Random` that `rollout.seed_policy` seeds, so a seed replays an episode as with the real
sampler). It records every batched `sample` call and which episode caches are held, so the tests
can assert on what the rollout asked for. `score` returns plain float tuples, not tensors: the update
(which back-propagates through them) needs the real tiny model.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any

from empo2_studio.policy import ActionRequest, Turn
from empo2_studio.types import ActionSample


class SeededGenerator:
    """Stands in for `torch.Generator`: `manual_seed` reseeds the draw of the scripted actions."""

    def __init__(self) -> None:
        self.rng = random.Random(0)
        self.seed: int | None = None

    def manual_seed(self, seed: int) -> SeededGenerator:
        self.seed = seed
        self.rng.seed(seed)
        return self


class ScriptedPolicy:
    """A `Policy` whose actions, log-probs and tips are scripted (see module docstring)."""

    decoding = "constrained"
    version = "base"
    chat_format = None  # only the update counts tokens with it, and the update needs the real model

    def __init__(
        self,
        script: Callable[[ActionRequest], str] | None = None,
        *,
        logprob: float = -0.5,
        tip: Callable[[int], str] = lambda i: f"tip {i}: try what raised the score",
    ) -> None:
        """
        Args:
            script: the action text for a request; None = a seeded random pick among the last turn's
                valid actions ("look" when it has none).
            logprob: the behaviour log-prob of every sampled token.
            tip: the i-th tip this policy writes (counted over its lifetime, from 0).
        """
        self.generator = SeededGenerator()
        self._script = script
        self.logprob = logprob
        self._tip = tip
        self.tips_written = 0
        self.calls: list[list[ActionRequest]] = []
        """Every `sample` batch, in order."""
        self.cached: set[str] = set()
        """Episode keys whose (pretend) KV cache is held: sampled and not yet forgotten."""
        self.adapter: str | None = None
        """The adapter folder last loaded; None = as built."""

    def sample(self, requests: Sequence[ActionRequest], *, temperature: float) -> list[ActionSample]:
        """One scripted action per request. ValueError on an empty batch or an answered last turn."""
        if not requests:
            raise ValueError("sample needs at least one request, got none")
        if any(r.turns[-1].action_ids is not None for r in requests):
            raise ValueError("the last turn of every request must await an action (action_ids None)")
        self.calls.append(list(requests))
        out = []
        for req in requests:
            valid = req.turns[-1].valid_actions
            text = self._script(req) if self._script else (self.generator.rng.choice(valid) if valid else "look")
            ids = tuple(text.encode("utf-8"))
            out.append(ActionSample(text, ids, (self.logprob,) * len(ids)))
            self.cached.add(req.key)
        return out

    def forget(self, key: str) -> None:
        self.cached.discard(key)

    def score(
        self, conversations: Sequence[Sequence[Turn]], *, temperature: float | Sequence[float] = 1.0
    ) -> list[list[tuple[float, ...]]]:
        """`logprob` for every action token, per conversation and turn (floats, not tensors)."""
        if not conversations:
            raise ValueError("score needs at least one conversation, got none")
        if any(t.action_ids is None for conv in conversations for t in conv):
            raise ValueError("every scored turn needs action_ids")
        return [[(self.logprob,) * len(t.action_ids or ()) for t in conv] for conv in conversations]

    def write_tips(
        self, conversations: Sequence[Sequence[Turn]], instruction: str, *, keys: Sequence[str] | None = None
    ) -> list[str]:
        """The next `len(conversations)` scripted tips; drops the caches of `keys`."""
        tips = [self._tip(self.tips_written + i) for i in range(len(conversations))]
        self.tips_written += len(conversations)
        for key in keys or ():
            self.forget(key)
        return tips

    def no_adapter(self) -> Any:
        return nullcontext()

    def trainable_parameters(self) -> list[Any]:
        return []

    def save_adapter(self, path: str) -> None:
        from pathlib import Path

        Path(path, "adapter_config.json").write_text("{}")

    def load_adapter(self, path: str) -> None:
        self.adapter = path
