"""A torch-free scripted policy for tests that exercise the rollout / memory loop, not the model.

`ScriptedPolicy` has the members of `empo2_studio.policy.Policy` that rollout, reflection and the
studio call, with outcomes fixed in advance: every token of an action has log-prob `logprob`, token
ids are the action's UTF-8 bytes, and the action is `script(request)` (default: a valid action drawn
by a `random.Random` that `rollout.seed_policy` seeds, so a seed replays an episode as with the real
sampler). It records every batched `sample` call and which episode caches are held, so the tests
can assert on what the rollout asked for.

It can also be trained, so a `Trainer` iteration runs without a tokenizer or a model: its one
trainable parameter is `shift` (a 0-d torch tensor, 0 when built), the "adapter", and `score` gives every
action token the log-prob `logprob + shift` as torch tensors with grad (torch is imported only there,
in `trainable_parameters` and the adapter files, so the rollout tests stay torch-free). At shift 0 a
re-score equals the behaviour log-probs (ratio 1), as with the real policy's unchanged weights. Token
counts for the update's length cut come from `ByteChatFormat`.
"""

from __future__ import annotations

import random
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
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


class ByteChatFormat:
    """Stands in for `policy.tokens.ChatFormat` (packed): a conversation's ids are, turn by turn, the
    user text's UTF-8 bytes then the action ids; the update counts tokens with `conversation_ids`."""

    packed = True

    def conversation_ids(self, turns: Sequence[Turn]) -> tuple[list[int], list[tuple[int, int]]]:
        """(ids, one (start, end) span of action ids per answered turn). ValueError when a turn other
        than the last has no action."""
        ids: list[int] = []
        spans: list[tuple[int, int]] = []
        for i, turn in enumerate(turns):
            ids.extend(turn.user_text.encode("utf-8"))
            if turn.action_ids is None:
                if i != len(turns) - 1:
                    raise ValueError(f"turn {i} has no action but is not the last turn")
                break
            spans.append((len(ids), len(ids) + len(turn.action_ids)))
            ids.extend(turn.action_ids)
        return ids, spans


class ScriptedPolicy:
    """A `Policy` whose actions, log-probs and tips are scripted (see module docstring)."""

    decoding = "constrained"
    version = "base"
    chat_format = ByteChatFormat()

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
        self._shift: Any = None  # the trainable torch parameter, made on first use (see module docstring)
        self._adapter_off = False

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

    @property
    def shift(self) -> Any:
        """The trainable 0-d float32 parameter added to every token's log-prob (imports torch)."""
        if self._shift is None:
            import torch

            self._shift = torch.nn.Parameter(torch.zeros((), dtype=torch.float32))
        return self._shift

    def score(self, conversations: Sequence[Sequence[Turn]], *, temperature: float | Sequence[float] = 1.0) -> list[list[Any]]:
        """Per conversation and turn, a (len(action_ids),) float32 tensor of `logprob + shift` (just
        `logprob` inside `no_adapter`); grad flows to `shift` when enabled. The temperature is
        checked for its count only: the scripted log-probs do not depend on it.
        ValueError on an empty batch, an unanswered turn or a temperature list of another length."""
        if not conversations:
            raise ValueError("score needs at least one conversation, got none")
        if any(t.action_ids is None for conv in conversations for t in conv):
            raise ValueError("every scored turn needs action_ids")
        if not isinstance(temperature, (int, float)) and len(temperature) != len(conversations):
            raise ValueError(f"{len(temperature)} temperatures for {len(conversations)} conversations")
        import torch

        offset = torch.zeros(()) if self._adapter_off else self.shift
        return [[self.logprob + offset.expand(len(t.action_ids or ())) for t in conv] for conv in conversations]

    def write_tips(
        self, conversations: Sequence[Sequence[Turn]], instruction: str, *, keys: Sequence[str] | None = None
    ) -> list[str]:
        """The next `len(conversations)` scripted tips; drops the caches of `keys`."""
        tips = [self._tip(self.tips_written + i) for i in range(len(conversations))]
        self.tips_written += len(conversations)
        for key in keys or ():
            self.forget(key)
        return tips

    @contextmanager
    def no_adapter(self) -> Iterator[None]:
        """Score as the base policy (shift 0) inside the context, as the KL reference does."""
        self._adapter_off = True
        try:
            yield
        finally:
            self._adapter_off = False

    def trainable_parameters(self) -> list[Any]:
        return [self.shift]

    def save_adapter(self, path: str) -> None:
        """`adapter_config.json` holding the shift, so a checkpoint resumes the trained value."""
        Path(path, "adapter_config.json").write_text(json.dumps({"shift": float(self.shift.detach())}))

    def load_adapter(self, path: str) -> None:
        """Take the shift of a folder `save_adapter` wrote (a folder without one keeps the current shift)."""
        self.adapter = path
        config = Path(path, "adapter_config.json")
        saved = json.loads(config.read_text() or "{}") if config.is_file() else {}
        if "shift" in saved:
            import torch

            with torch.no_grad():
                self.shift.fill_(float(saved["shift"]))
