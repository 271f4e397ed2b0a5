"""Next-action sampling with a KV cache kept per episode across turns (paper §1.2 step 2).

Each episode's cache holds the ids it has already processed; a new turn crops it to the longest
common prefix with the new prompt (normally all of it) and feeds only the new tokens — the previous
action's tokens, the end of turn, the new user message and the assistant header. Episodes without a
cache start from a prefix computed once for the whole batch (instructions, few-shot examples, task).
Every forward runs one sequence without padding, so cached and packed log-probs agree to float
rounding. In constrained decoding a position with a single allowed token needs no forward at all:
its renormalised log-prob is exactly 0, and the token is fed with the next forward.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from empo2_studio.policy.tokens import ActionTrie, ChatFormat


@dataclass
class CachedState:
    """What one episode's cache has processed: `ids`, the KV `cache`, next-token `logits` (V,)."""

    ids: list[int]
    cache: Any
    logits: torch.Tensor


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class CachedSampler:
    """Feeds sequences through the model incrementally and samples actions token by token."""

    def __init__(self, model: Any, fmt: ChatFormat, *, max_states: int = 64):
        self.model = model
        self.fmt = fmt
        self.states: OrderedDict[str, CachedState] = OrderedDict()
        self.max_states = max_states
        self.tokens_processed = 0
        """Tokens fed through the model since creation (benchmarks read it)."""

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _fresh(self) -> CachedState:
        from transformers import DynamicCache

        return CachedState([], DynamicCache(config=getattr(self.model, "config", None)), torch.empty(0))

    @torch.no_grad()
    def feed(self, state: CachedState, new_ids: Sequence[int]) -> None:
        """Process `new_ids` after `state.ids`, updating the cache and the next-token logits."""
        if not new_ids:
            return
        x = torch.tensor([list(new_ids)], device=self.device)
        out = self.model(input_ids=x, cache=state.cache, use_cache=True, logits_to_keep=1)
        state.cache = out.cache if getattr(out, "cache", None) is not None else state.cache
        state.ids.extend(new_ids)
        state.logits = out.logits[0, -1].float()
        self.tokens_processed += len(new_ids)

    def _crop(self, state: CachedState, keep: int) -> None:
        drop = len(state.ids) - keep
        if drop > 0:
            state.cache.crop(-drop)
            del state.ids[keep:]

    def prepare(self, keys: Sequence[str], prompts: Sequence[list[int]]) -> list[CachedState]:
        """A state per request whose ids equal its prompt, reusing caches as far as they match."""
        states: list[CachedState | None] = []
        fresh: list[int] = []
        for i, (key, prompt) in enumerate(zip(keys, prompts)):
            st = self.states.pop(key, None)
            keep = common_prefix(st.ids, prompt) if st is not None else 0
            if st is None or keep == 0:
                states.append(None)
                fresh.append(i)
            else:
                self._crop(st, min(keep, len(prompt) - 1))
                states.append(st)
        if fresh:
            shared = prompts[fresh[0]]
            n = len(shared)
            for i in fresh[1:]:
                n = min(n, common_prefix(shared, prompts[i]))
            base = self._fresh()
            self.feed(base, shared[: min(n, min(len(prompts[i]) for i in fresh) - 1)])
            for j, i in enumerate(fresh):
                states[i] = base if j == len(fresh) - 1 else copy.deepcopy(base)
        for key, st, prompt in zip(keys, states, prompts):
            assert st is not None
            self.feed(st, prompt[len(st.ids):])
            self.states[key] = st
            self.states.move_to_end(key)
        while len(self.states) > self.max_states:
            self.states.popitem(last=False)
        return states  # type: ignore[return-value]

    def forget(self, key: str) -> None:
        self.states.pop(key, None)

    @torch.no_grad()
    def sample_action(
        self,
        state: CachedState,
        *,
        trie: ActionTrie | None,
        temperature: float,
        max_tokens: int,
        stop_ids: frozenset[int],
        newline_ids: frozenset[int],
        blank_ids: frozenset[int],
        generator: torch.Generator,
    ) -> tuple[list[int], list[float]]:
        """Sample one action after `state` (whose logits predict its first token).

        Returns (token ids, behaviour log-probs). The log-probs are those of the distribution sampled
        from: logits / temperature, masked to the trie's allowed tokens in constrained decoding
        (temperature 0 = greedy, log-probs at temperature 1). Sampled tokens are not fed to the cache;
        the next turn feeds them together with its new message.
        """
        node = trie.root if trie is not None else None
        tokens: list[int] = []
        logps: list[float] = []
        pending: list[int] = []
        text_started = False
        for _ in range(max_tokens):
            if node is not None and len(node) == 1:
                tok, lp = next(iter(node)), 0.0
            else:
                if pending:
                    self.feed(state, pending)
                    pending = []
                tok, lp = self._draw(state.logits, node, temperature, generator)
            tokens.append(tok)
            logps.append(lp)
            pending.append(tok)
            if node is not None:
                node = node[tok]
                if not node:
                    break
            elif tok in stop_ids:
                break
            elif tok in newline_ids and (text_started or tok not in blank_ids):
                break  # end of line after some text (leading blank lines do not end an action)
            else:
                text_started = text_started or tok not in blank_ids
        return tokens, logps

    @staticmethod
    def _draw(
        logits: torch.Tensor, node: dict | None, temperature: float, generator: torch.Generator
    ) -> tuple[int, float]:
        if node is not None:
            allowed = torch.tensor(list(node), device=logits.device)
            masked = torch.full_like(logits, float("-inf"))
            masked[allowed] = logits[allowed]
            logits = masked
        if temperature <= 0:
            logp = torch.log_softmax(logits, dim=-1)
            tok = int(torch.argmax(logp))
            return tok, float(logp[tok])
        logp = torch.log_softmax(logits / temperature, dim=-1)
        tok = int(torch.multinomial(logp.exp().cpu(), 1, generator=generator))
        return tok, float(logp[tok])
