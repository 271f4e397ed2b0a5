"""`HFPolicy`: a Hugging Face causal LM with a LoRA adapter behind the `Policy` protocol.

sample  — batched next-action sampling with per-episode KV caches (see sampling.py);
score   — exact per-token log-probs of the sampled actions, packed: one forward per conversation
          (turn t's prompt is a prefix of turn t+1's), instead of one forward per turn over its whole
          history (the recipe's layout); logits are divided by the episode's sampling temperature
          (the behaviour distribution, see `policy.logprob_temperature`) and constrained decoding
          rebuilds its masks from the turns' valid actions, so an unchanged policy re-scores its own
          samples with ratio 1 at every temperature;
action decoding — the whole action drawn from a categorical over the valid actions (choice.py);
write_tips — free-text reflection after an episode (paper §2), through the same cached sampler;
adapter I/O — PEFT directory format.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch

from empo2_studio.policy import ActionRequest, Turn, instruction_list, logprob_temperature
from empo2_studio.policy.choice import ChoiceSettings, Chooser
from empo2_studio.policy.lora import CHECKPOINTED
from empo2_studio.policy.sampling import CachedSampler
from empo2_studio.policy.tokens import ActionTrie, ChatFormat
from empo2_studio.types import DECODINGS, ActionSample

_NEWLINE_CACHE: dict[tuple[str, int], tuple[frozenset[int], frozenset[int]]] = {}


class HFPolicy:
    """The LLM agent (paper §1). Attributes: `model` (peft-wrapped), `tokenizer`, `device`,
    `base_model_name`, `decoding`, `version`, `chat_format`, `metrics` (`policy/…` counters)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        decoding: str = "constrained",
        base_model_name: str,
        max_action_tokens: int = 32,
        max_tip_tokens: int = 96,
        seed: int = 0,
        choice: ChoiceSettings | None = None,
    ):
        if decoding not in DECODINGS:
            raise ValueError(f"policy.decoding must be one of {list(DECODINGS)}, got {decoding!r}")
        self.model = model
        self.tokenizer = tokenizer
        self.decoding = decoding
        self.base_model_name = base_model_name
        self.max_action_tokens = max_action_tokens
        self.max_tip_tokens = max_tip_tokens
        self.version = "base"
        self.chat_format = ChatFormat.probe(tokenizer)
        self.sampler = CachedSampler(model, self.chat_format)
        self.generator = torch.Generator().manual_seed(seed)
        self.metrics: dict[str, float] = {"policy/packed_fallback": 0.0 if self.chat_format.packed else 1.0}
        self._newline: tuple[frozenset[int], frozenset[int]] | None = None
        self.train_forward: Any = None
        """A wrapper of `model` (e.g. torch DDP) that grad-enabled scoring calls instead of `model`:
        data parallelism needs the forwards it will reduce to pass through it. Sampling, tips and
        no-grad scoring keep calling `model` (same parameters, no collectives)."""
        self._checkpointed: list[Any] | None = None  # the layers `_checkpointing` switches, found once
        self.chooser = Chooser(self, choice or ChoiceSettings())
        """Action decoding's scorer; `chooser.settings` = normalisation and PMI (config `policy.choice_*`)."""

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # ---------------------------------------------------------------- sampling

    def prompt_ids(self, turns: Sequence[Turn]) -> list[int]:
        """Ids of the sampling prompt of the conversation's last (unanswered) turn."""
        if self.chat_format.packed:
            return self.chat_format.conversation_ids(turns)[0]
        return self.chat_format.turn_prompt_ids(turns, len(turns) - 1)

    def sample(self, requests: Sequence[ActionRequest], *, temperature: float) -> list[ActionSample]:
        """Sample the next action of every request (B episodes) in one call; see `Policy.sample`.

        temperature 0 means greedy. Raises ValueError on an empty batch, a last turn that already has
        an action, an earlier turn without one, duplicate keys, or (constrained) no valid actions.
        """
        self._check_requests(requests, temperature)
        if self.decoding == "action":
            return self._sample_actions(requests, temperature)
        prompts = [self.prompt_ids(r.turns) for r in requests]
        tries = [
            ActionTrie.build(self.chat_format, r.turns[-1].valid_actions) if self.decoding == "constrained" else None
            for r in requests
        ]
        newline, blank = self._newline_ids() if self.decoding == "free" else (frozenset(), frozenset())
        stop = frozenset(t for t in (self.chat_format.eot_id, self.tokenizer.eos_token_id) if t is not None)
        was_training = self.model.training
        self.model.eval()
        try:
            kw = dict(temperature=temperature, max_tokens=self.max_action_tokens, stop_ids=stop,
                      newline_ids=newline, blank_ids=blank, generator=self.generator)
            keys = [r.key for r in requests]
            if self.sampler.batched:
                results = self.sampler.sample_batch(keys, prompts, tries, **kw)
            else:
                states = self.sampler.prepare(keys, prompts)
                results = [self.sampler.sample_action(st, trie=trie, **kw) for st, trie in zip(states, tries)]
            out = []
            for ids, logps in results:
                text = self.tokenizer.decode(ids, skip_special_tokens=True).strip()
                out.append(ActionSample(text=text, token_ids=tuple(ids), logprobs=tuple(logps)))
        finally:
            self.model.train(was_training)
        return out

    def _sample_actions(self, requests: Sequence[ActionRequest], temperature: float) -> list[ActionSample]:
        """Action decoding: one whole valid action per request; `logprobs` = (log π(action),) (choice.py)."""
        was_training = self.model.training
        self.model.eval()
        try:
            chosen = self.chooser.sample(requests, temperature)
        finally:
            self.model.train(was_training)
        return [
            ActionSample(text=self.tokenizer.decode(list(ids), skip_special_tokens=True).strip(), token_ids=ids, logprobs=(lp,))
            for ids, lp in chosen
        ]

    def forget(self, key: str) -> None:
        """Drop the KV cache kept for episode `key` (call when the episode ends)."""
        self.sampler.forget(key)

    def clear_cache(self) -> None:
        """Drop every episode's KV cache (the caches hold keys/values of the current weights:
        call after an optimizer step if an episode continues across it)."""
        self.sampler.states.clear()

    def _check_requests(self, requests: Sequence[ActionRequest], temperature: float) -> None:
        if not requests:
            raise ValueError("sample() needs at least one ActionRequest, got an empty batch")
        if not temperature >= 0:
            raise ValueError(f"temperature must be ≥ 0 (0 = greedy), got {temperature!r}")
        keys = [r.key for r in requests]
        if len(set(keys)) != len(keys):
            raise ValueError(f"duplicate episode keys in one batch: {keys}")
        for r in requests:
            if not r.turns or r.turns[-1].action_ids is not None:
                raise ValueError(f"request {r.key!r}: the last turn must await an action (action_ids=None)")
            if any(t.action_ids is None for t in r.turns[:-1]):
                raise ValueError(f"request {r.key!r}: every earlier turn needs its action_ids")
            if self.decoding in ("constrained", "action") and not r.turns[-1].valid_actions:
                raise ValueError(f"request {r.key!r}: {self.decoding} decoding needs valid_actions on the last turn")

    def _newline_ids(self) -> tuple[frozenset[int], frozenset[int]]:
        """(tokens containing a newline, whitespace-only tokens), computed once for free decoding."""
        if self._newline is None:
            key = (self.tokenizer.name_or_path, len(self.tokenizer))
            if key not in _NEWLINE_CACHE:
                texts = self.tokenizer.batch_decode([[i] for i in range(len(self.tokenizer))])
                _NEWLINE_CACHE[key] = (
                    frozenset(i for i, t in enumerate(texts) if "\n" in t),
                    frozenset(i for i, t in enumerate(texts) if not t.strip()),
                )
            self._newline = _NEWLINE_CACHE[key]
        return self._newline

    # ---------------------------------------------------------------- scoring

    def score(
        self, conversations: Sequence[Sequence[Turn]], *, temperature: float | Sequence[float] = 1.0
    ) -> list[list[torch.Tensor]]:
        """Per-token log-probs of every turn's action ids, one forward per conversation (packed).

        `temperature` is the sampling temperature of every conversation or one per conversation; the
        log-probs are those of softmax(logits / T), masked in constrained decoding — the distribution
        `sample` drew from (T = 0, greedy, scores at T = 1). Returns per conversation a list of 1-D
        tensors (len(action_ids),). Gradients flow to the LoRA parameters when grad is enabled. Falls
        back to `score_per_turn` (and counts it in `metrics["policy/packed_fallback"]`) when the chat
        template breaks the prefix property. ValueError: see `Policy.score`.
        """
        temps = self._check_conversations(conversations, temperature)
        if self.decoding == "action":  # one log-prob per turn: the action's, in its categorical
            return self.chooser.score(conversations, temps)
        if not self.chat_format.packed:
            self.metrics["policy/packed_fallback"] += len(conversations)
            return self.score_per_turn(conversations, temperature=temperature)
        out = []
        for conv, temp in zip(conversations, temps):
            ids, spans = self.chat_format.conversation_ids(conv)
            positions = [p for s, e in spans for p in range(s - 1, e - 1)]
            targets = [t for turn in conv for t in turn.action_ids]  # type: ignore[union-attr]
            logits = self._logits(ids, positions) / temp
            logp = self._token_logprobs(logits, targets, self._masks(conv))
            out.append(list(torch.split(logp, [e - s for s, e in spans])))
        return out

    def allowed_logprobs(self, conversation: Sequence[Turn], *, temperature: float = 1.0) -> list[torch.Tensor]:
        """Log-probs over the allowed next tokens at every action-token position of one conversation
        (constrained decoding: the step's valid-action trie; one packed forward, as `score`).

        Returns one 1-D tensor per action token, over that position's allowed token ids in
        `ActionTrie.masks` order (sums to 1 in probability); gradients flow when grad is enabled.
        Used to match a whole distribution, e.g. a KL anchor to the base model (scripts/make_warmstart.py).
        ValueError: free decoding (no allowed set), or a conversation `score` would refuse.
        """
        if self.decoding != "constrained":
            raise ValueError("allowed_logprobs needs constrained decoding (free decoding allows every token)")
        temp = self._check_conversations([conversation], temperature)[0]
        ids, spans = self.chat_format.conversation_ids(conversation)
        positions = [p for s, e in spans for p in range(s - 1, e - 1)]
        logits = self._logits(ids, positions) / temp
        masks = self._masks(conversation) or []
        return [torch.log_softmax(row[m], dim=-1) for row, m in zip(logits, masks, strict=True)]

    def score_per_turn(
        self, conversations: Sequence[Sequence[Turn]], *, temperature: float | Sequence[float] = 1.0
    ) -> list[list[torch.Tensor]]:
        """The reference layout: one forward per turn over that turn's whole prompt + action
        (same arguments, returns and temperature rule as `score`)."""
        temps = self._check_conversations(conversations, temperature)
        if self.decoding == "action":
            return self.chooser.score(conversations, temps)
        out = []
        for conv, temp in zip(conversations, temps):
            per_turn = []
            for t, turn in enumerate(conv):
                prompt = self.prompt_ids(list(conv[:t]) + [Turn(turn.user_text, None, turn.valid_actions)])
                action = list(turn.action_ids)  # type: ignore[arg-type]
                positions = list(range(len(prompt) - 1, len(prompt) + len(action) - 1))
                logits = self._logits(prompt + action, positions) / temp
                per_turn.append(self._token_logprobs(logits, action, self._masks([turn])))
            out.append(per_turn)
        return out

    def _check_conversations(
        self, conversations: Sequence[Sequence[Turn]], temperature: float | Sequence[float]
    ) -> list[float]:
        """Validate a scoring batch; returns the divisor of each conversation's logits."""
        if not conversations:
            raise ValueError("score() needs at least one conversation, got an empty batch")
        for i, conv in enumerate(conversations):
            if not conv:
                raise ValueError(f"conversation {i} has no turns")
            if any(t.action_ids is None for t in conv):
                raise ValueError(f"conversation {i}: every turn needs action_ids to be scored")
        if isinstance(temperature, (int, float)) and not isinstance(temperature, bool):
            return [logprob_temperature(temperature)] * len(conversations)
        temps = list(temperature)  # type: ignore[arg-type]
        if len(temps) != len(conversations):
            raise ValueError(f"score() got {len(temps)} temperatures for {len(conversations)} conversations")
        return [logprob_temperature(t) for t in temps]

    def _logits(self, ids: list[int], positions: list[int]) -> torch.Tensor:
        x = torch.tensor([ids], device=self.device)
        keep = torch.tensor(positions, dtype=torch.long, device=self.device)
        if not torch.is_grad_enabled():
            return self.model(input_ids=x, use_cache=False, logits_to_keep=keep).logits[0].float()
        model = self.train_forward if self.train_forward is not None else self.model
        with self._checkpointing():
            return model(input_ids=x, use_cache=False, logits_to_keep=keep).logits[0].float()

    @contextlib.contextmanager
    def _checkpointing(self) -> Iterator[None]:
        """Activation checkpointing on for the layers `lora.checkpoint_adapted_layers` marked
        (transformers checkpoints a layer only in training mode; the model otherwise stays in eval, so
        dropout and the rest of the model are untouched). A no-op when none are marked."""
        if self._checkpointed is None:
            self._checkpointed = [m for m in self.model.modules() if getattr(m, CHECKPOINTED, False)]
        before = [m.training for m in self._checkpointed]
        for m in self._checkpointed:
            m.training = True
        try:
            yield
        finally:
            for m, was in zip(self._checkpointed, before):
                m.training = was

    def _masks(self, conv: Sequence[Turn]) -> list[list[int]] | None:
        if self.decoding != "constrained":
            return None
        masks: list[list[int]] = []
        for turn in conv:
            masks.extend(ActionTrie.build(self.chat_format, turn.valid_actions).masks(turn.action_ids))  # type: ignore[arg-type]
        return masks

    @staticmethod
    def _token_logprobs(logits: torch.Tensor, targets: list[int], masks: list[list[int]] | None) -> torch.Tensor:
        """log_softmax + gather, over the allowed tokens only when `masks` is given: (P, V) → (P,)."""
        if masks is not None and len(targets):
            allowed = torch.zeros_like(logits, dtype=torch.bool)
            rows = torch.tensor([r for r, m in enumerate(masks) for _ in m], device=logits.device)
            cols = torch.tensor([c for m in masks for c in m], device=logits.device)
            allowed[rows, cols] = True
            logits = logits.masked_fill(~allowed, float("-inf"))
        tgt = torch.tensor(targets, dtype=torch.long, device=logits.device)
        return torch.log_softmax(logits, dim=-1).gather(-1, tgt[:, None]).squeeze(-1)

    # ---------------------------------------------------------------- reflection

    def write_tips(
        self, conversations: Sequence[Sequence[Turn]], instruction: str | Sequence[str], *,
        keys: Sequence[str] | None = None,
    ) -> list[str]:  # fmt: skip
        """Greedy free text (≤ max_tip_tokens, up to the end of its first line) answering `instruction`
        after each conversation, all in one batch; returns the raw decoded texts (paper §2).
        `instruction` is one text for all, or one per conversation (`memory.reflection`'s observation notes).

        `keys` names each conversation's episode: an episode whose sampling KV cache is still kept
        (see `rollout.play_group(keep_caches=True)`) only feeds its last action and the instruction
        instead of its whole conversation again. The caches of `keys` are dropped afterwards.
        Raises ValueError on an empty batch, or a `keys` or `instruction` list of another length.
        """
        instructions = instruction_list(instruction, conversations, keys)
        # Keys of episodes without a kept cache start fresh (sharing the batch's common prefix).
        keys = list(keys) if keys is not None else [f"tip-{uuid.uuid4().hex}" for _ in conversations]
        prompts = [self.prompt_ids(list(conv) + [Turn(text, None)]) for conv, text in zip(conversations, instructions)]
        newline, blank = self._newline_ids()
        stop = frozenset(t for t in (self.chat_format.eot_id, self.tokenizer.eos_token_id) if t is not None)
        was_training = self.model.training
        self.model.eval()
        try:
            results = self.sampler.sample_batch(
                keys, prompts, [None] * len(prompts), temperature=0.0, max_tokens=self.max_tip_tokens,
                stop_ids=stop, newline_ids=newline, blank_ids=blank, generator=self.generator,
            )  # fmt: skip
        finally:
            self.model.train(was_training)
            for key in keys:
                self.sampler.forget(key)
        return [self.tokenizer.decode(ids, skip_special_tokens=True).strip() for ids, _ in results]

    # ---------------------------------------------------------------- adapter

    def no_adapter(self) -> Any:
        """Score with the adapter-free base model inside this context (PEFT's `disable_adapter`)."""
        return self.model.disable_adapter()

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """The LoRA parameters (requires_grad=True); the base weights are frozen."""
        return [p for p in self.model.parameters() if p.requires_grad]

    def save_adapter(self, path: str) -> None:
        """Write the LoRA adapter as a PEFT directory (adapter_config.json + adapter_model.safetensors)."""
        self.model.peft_config["default"].base_model_name_or_path = self.base_model_name
        self.model.save_pretrained(str(path))

    def load_adapter(self, path: str) -> None:
        """Load LoRA weights saved by `save_adapter`. ValueError if the directory is not a PEFT adapter,
        was saved for another base model, has another LoRA rank / targets, or holds tensors whose shapes
        do not fit this model (another model's adapter); the current weights stay unchanged."""
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        from empo2_studio.policy.adapter_check import (
            adapter_config_mismatch,
            adapter_shape_mismatches,
            module_shapes,
            safetensors_shapes,
        )

        folder = Path(path)
        cfg_file, weights = folder / "adapter_config.json", folder / "adapter_model.safetensors"
        if not cfg_file.is_file() or not weights.is_file():
            raise ValueError(f"{str(path)!r} is not a PEFT adapter directory (needs {cfg_file.name} and {weights.name})")
        saved = json.loads(cfg_file.read_text())
        ours = self.model.peft_config["default"]
        problem = adapter_config_mismatch(saved, self.base_model_name, ours.r, ours.target_modules, ours.layers_to_transform)
        if problem:
            raise ValueError(f"adapter {str(path)!r} {problem}")
        # Shapes first: a size mismatch inside set_peft_model_state_dict comes after the tensors that
        # did fit were already copied in.
        problems = adapter_shape_mismatches(safetensors_shapes(weights), module_shapes(self.model.get_base_model()), ours.r)
        if problems:
            more = f" (and {len(problems) - 1} more mismatched tensors)" if len(problems) > 1 else ""
            raise ValueError(f"adapter {str(weights)!r} does not fit base model {self.base_model_name!r}: {problems[0]}{more}")
        state = load_file(str(weights), device=str(self.device))
        result = set_peft_model_state_dict(self.model, state)
        if getattr(result, "unexpected_keys", None):
            raise ValueError(f"adapter {str(path)!r} has unexpected weights: {result.unexpected_keys[:5]}")
        self.sampler.states.clear()  # cached keys/values belong to the old weights
        self.version = folder.name
