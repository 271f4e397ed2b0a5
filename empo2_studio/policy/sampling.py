"""Next-action sampling with a KV cache kept per episode across turns (paper §1.2 step 2).

Each episode's cache holds the ids it has already processed; a new turn crops it to the longest
common prefix with the new prompt (normally all of it) and feeds only the new tokens — the previous
action's tokens, the end of turn, the new user message and the assistant header. Episodes without a
cache start from a prefix computed once for the whole batch (instructions, few-shot examples, task).
By default (`CachedSampler.batched`) the episodes of a call share every forward: their caches are
left-padded into one batch (`BatchState`, attention mask 0 on padding, explicit position ids per
row), the new turn tokens go through one ragged forward and each decoding position is one forward
over all unfinished episodes; each episode's cache is cut back out (padding dropped) when its action
ends. On a CPU each forward of a LoRA-wrapped 4-bit model has a large fixed cost, which batching
pays once per position instead of once per episode. Masked padding contributes exact zeros, so
batched, per-episode and packed log-probs agree to float rounding. In constrained decoding a
position where a single token is allowed needs no model output: its renormalised log-prob is
exactly 0, and the token is fed with the next forward.
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


class _Row:
    """One episode's action being decoded: trie node (None = free), tokens and log-probs so far."""

    def __init__(self, node: dict | None):
        self.node = node
        self.tokens: list[int] = []
        self.logps: list[float] = []
        self.text_started = False

    def forced(self) -> tuple[int, float] | None:
        """(token, 0.0) when the trie allows a single token here: no model output needed."""
        if self.node is not None and len(self.node) == 1:
            return next(iter(self.node)), 0.0
        return None

    def push(self, tok: int, lp: float, stop_ids: frozenset[int], newline_ids: frozenset[int], blank_ids: frozenset[int]) -> bool:
        """Append a token; True when the action is complete."""
        self.tokens.append(tok)
        self.logps.append(lp)
        if self.node is not None:
            self.node = self.node[tok]
            return not self.node
        if tok in stop_ids:
            return True
        if tok in newline_ids and (self.text_started or tok not in blank_ids):
            return True  # end of line after some text (leading blank lines do not end an action)
        self.text_started = self.text_started or tok not in blank_ids
        return False


class CachedSampler:
    """Feeds sequences through the model incrementally and samples actions token by token."""

    def __init__(self, model: Any, fmt: ChatFormat, *, max_states: int = 64, batched: bool = True):
        self.model = model
        self.fmt = fmt
        self.batched = batched
        """True: one forward per decoding position over all episodes (`sample_batch`); False: every
        episode decoded on its own (`prepare` + `sample_action`). Both give the same greedy tokens."""
        self.batched_prefill = True
        """With `batched`: True feeds all episodes' new turn tokens in one ragged forward; False
        feeds them episode by episode and batches only the decoding."""
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

    def prepare(self, keys: Sequence[str], prompts: Sequence[list[int]], *, feed: bool = True) -> list[CachedState]:
        """A state per request whose ids equal its prompt, reusing caches as far as they match.

        With `feed=False` the states stop short of their prompts (≥ 1 token left, fed by the caller in
        one batched forward) and fresh episodes share the prefix's cache object (read only)."""
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
                if not feed:
                    states[i] = CachedState(list(base.ids), base.cache, base.logits)
                else:
                    states[i] = base if j == len(fresh) - 1 else copy.deepcopy(base)
        for key, st, prompt in zip(keys, states, prompts):
            assert st is not None
            if feed:
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
        from: softmax(logits / temperature), masked to the trie's allowed tokens in constrained
        decoding (temperature 0 = greedy, log-probs at temperature 1: `policy.logprob_temperature`);
        `HFPolicy.score` at the same temperature reproduces them. Sampled tokens are not fed to the cache;
        the next turn feeds them together with its new message.
        """
        row = _Row(trie.root if trie is not None else None)
        pending: list[int] = []
        for _ in range(max_tokens):
            if row.forced() is None and pending:
                self.feed(state, pending)
                pending = []
            tok, lp = row.forced() or self._draw(state.logits, row.node, temperature, generator)
            pending.append(tok)
            if row.push(tok, lp, stop_ids, newline_ids, blank_ids):
                break
        return row.tokens, row.logps

    @torch.no_grad()
    def sample_batch(
        self,
        keys: Sequence[str],
        prompts: Sequence[list[int]],
        tries: Sequence[ActionTrie | None],
        *,
        temperature: float,
        max_tokens: int,
        stop_ids: frozenset[int],
        newline_ids: frozenset[int],
        blank_ids: frozenset[int],
        generator: torch.Generator,
    ) -> list[tuple[list[int], list[float]]]:
        """Sample one action per episode with ONE forward per decoding position over all episodes.

        The episodes' caches are left-padded into one batch (`BatchState`); their new turn tokens go
        through one ragged forward, then every position feeds each unfinished episode's previous
        token(s) together. A position where every unfinished episode's trie allows a single token
        needs no forward (the tokens are fed with the next one). Each episode's cache is cut out of
        the batch (padding dropped) when its action ends. Same returns as `sample_action`; greedy
        tokens equal the one-episode-at-a-time path, log-probs to float rounding.
        """
        states = self.prepare(keys, prompts, feed=not self.batched_prefill)
        if not plain_layers(states[0].cache):  # e.g. sliding-window layers: no exact left padding
            seen: set[int] = set()
            for st in states:  # fresh episodes share the prefix's cache: give each its own
                if id(st.cache) in seen:
                    st.cache = copy.deepcopy(st.cache)
                seen.add(id(st.cache))
            return self._one_by_one(states, prompts, tries, temperature, max_tokens, stop_ids, newline_ids, blank_ids, generator)
        config = getattr(self.model, "config", None)
        batch = BatchState(states, range(len(states)), config)
        for st in states:  # the batch holds a padded copy and `_finish` gives each episode its cache back:
            st.cache = None  # drop the originals now, not after decoding (peak RSS 1.96 → 1.83 GiB)
        try:
            return self._decode_batch(batch, states, prompts, tries, temperature, max_tokens, stop_ids, newline_ids, blank_ids, generator)
        except BaseException:
            for key in keys:  # a cache lost mid-batch: those episodes start afresh next turn
                self.forget(key)
            raise

    def _decode_batch(self, batch, states, prompts, tries, temperature, max_tokens, stop_ids, newline_ids, blank_ids, generator):
        """`sample_batch`'s decoding loop over the left-padded `batch`; same returns."""
        pad_id = self.fmt.tokenizer.pad_token_id or 0
        pending = [list(p[len(st.ids):]) for st, p in zip(states, prompts)]
        rows = [_Row(t.root if t is not None else None) for t in tries]
        logits = None if self.batched_prefill else torch.stack([st.logits for st in states])
        for _ in range(max_tokens):
            live = batch.rows
            if any(rows[i].forced() is None for i in live) and pending[live[0]]:
                logits = batch.forward(self.model, [pending[i] for i in live], pad_id)
                for i in live:
                    states[i].ids.extend(pending[i])
                    self.tokens_processed += len(pending[i])
                    pending[i] = []
            done = []
            for b, i in enumerate(live):
                tok, lp = rows[i].forced() or self._draw(logits[b], rows[i].node, temperature, generator)  # type: ignore[index]
                pending[i].append(tok)
                if rows[i].push(tok, lp, stop_ids, newline_ids, blank_ids):
                    done.append(b)
            self._finish(batch, states, done, max_tokens=len(rows[live[0]].tokens) >= max_tokens)
            if not batch.rows:
                break
        return [(r.tokens, r.logps) for r in rows]

    def _finish(self, batch: BatchState, states: list[CachedState], done: list[int], *, max_tokens: bool) -> None:
        """Cut finished rows' caches out of the batch (all rows when the token limit is reached)."""
        if max_tokens:
            done = list(range(len(batch.rows)))
        if not done:
            return
        for b in done:
            states[batch.rows[b]].cache = batch.extract(b)
        batch.keep([b for b in range(len(batch.rows)) if b not in done])

    def _one_by_one(self, states, prompts, tries, temperature, max_tokens, stop_ids, newline_ids, blank_ids, generator):
        out = []
        for st, prompt, trie in zip(states, prompts, tries):
            self.feed(st, prompt[len(st.ids):])
            out.append(self.sample_action(
                st, trie=trie, temperature=temperature, max_tokens=max_tokens, stop_ids=stop_ids,
                newline_ids=newline_ids, blank_ids=blank_ids, generator=generator,
            ))
        return out

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


# ---------------------------------------------------------------- batched forwards across episodes


def cache_from_tensors(kv: Sequence[tuple[torch.Tensor, torch.Tensor]], config: Any = None) -> Any:
    """A DynamicCache whose layer l holds `kv[l]` = (keys, values), each (B, H, T, D), without a copy."""
    from transformers import DynamicCache

    cache = DynamicCache(config=config)
    for layer, (k, v) in zip(cache.layers, kv):
        layer.lazy_initialization(k, v)
        layer.keys, layer.values = k, v
    return cache


def plain_layers(cache: Any) -> bool:
    """True when every layer is a full-attention DynamicLayer (left padding is only exact there)."""
    from transformers.cache_utils import DynamicLayer

    return all(type(layer) is DynamicLayer for layer in cache.layers)


class BatchState:
    """Many episodes' caches as one left-padded batch: a DynamicCache (B, H, T, D) per layer, the
    attention `mask` (B, T) with 0 on padding (also padding inside a ragged block of new tokens),
    and per row the next position id (B,) = real tokens so far. Rows are episodes `rows[b]`."""

    def __init__(self, states: Sequence[CachedState], rows: Sequence[int], config: Any):
        self.config = config
        self.rows = list(rows)
        lens = [len(states[i].ids) for i in self.rows]
        width = max(lens)
        ref = next((states[i].cache for i in self.rows if len(states[i].ids)), None)
        self.pos = torch.tensor(lens, dtype=torch.long)
        if ref is None:  # nothing cached yet: the first forward starts the cache
            self.cache = cache_from_tensors([], config)
            self.mask = torch.zeros(len(lens), 0, dtype=torch.long)
            return
        kv = []
        for layer_idx, layer in enumerate(ref.layers):
            shape = (len(lens), layer.keys.shape[1], width, layer.keys.shape[3])
            keys = layer.keys.new_zeros(shape)
            values = layer.values.new_zeros(shape[:3] + (layer.values.shape[3],))
            for b, (i, n) in enumerate(zip(self.rows, lens)):
                if n:
                    src = states[i].cache.layers[layer_idx]
                    keys[b, :, width - n :] = src.keys[0]
                    values[b, :, width - n :] = src.values[0]
            kv.append((keys, values))
        self.cache = cache_from_tensors(kv, config)
        self.mask = torch.tensor([[0] * (width - n) + [1] * n for n in lens], dtype=torch.long)

    def forward(self, model: Any, new: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
        """Feed `new[b]` (≥ 1 token each, ragged: left-padded within the block) to every row;
        returns the next-token logits (B, V) in fp32."""
        width = max(len(n) for n in new)
        device = next(model.parameters()).device
        ids = torch.tensor([[pad_id] * (width - len(n)) + list(n) for n in new], device=device)
        block = torch.tensor([[0] * (width - len(n)) + [1] * len(n) for n in new], dtype=torch.long)
        steps = torch.cumsum(block, dim=1) - 1  # 0, 1, … over each row's real tokens
        position_ids = (self.pos[:, None] + steps.clamp(min=0)).to(device)
        self.mask = torch.cat([self.mask, block], dim=1)
        out = model(
            input_ids=ids,
            attention_mask=self.mask.to(device),
            position_ids=position_ids,
            cache=self.cache,
            use_cache=True,
            logits_to_keep=1,
        )
        self.cache = out.cache if getattr(out, "cache", None) is not None else self.cache
        self.pos += block.sum(dim=1)
        return out.logits[:, -1].float()

    def extract(self, b: int) -> Any:
        """Row `b`'s cache without its padding: a fresh (1, H, n, D) DynamicCache."""
        cols = self.mask[b].nonzero().squeeze(1)
        contiguous = len(cols) and int(cols[-1] - cols[0]) + 1 == len(cols)
        kv = []
        for layer in self.cache.layers:
            if contiguous:
                s = slice(int(cols[0]), int(cols[-1]) + 1)
                kv.append((layer.keys[b : b + 1, :, s].clone(), layer.values[b : b + 1, :, s].clone()))
            else:
                idx = cols.to(layer.keys.device)
                kv.append((layer.keys[b : b + 1].index_select(2, idx), layer.values[b : b + 1].index_select(2, idx)))
        return cache_from_tensors(kv, self.config)

    def keep(self, keep_rows: Sequence[int]) -> None:
        """Drop every row not in `keep_rows` (batch positions), and columns now padding in all rows."""
        idx = torch.tensor(list(keep_rows), dtype=torch.long)
        self.mask, self.pos = self.mask[idx], self.pos[idx]
        self.rows = [self.rows[b] for b in keep_rows]
        used = self.mask.any(dim=0).nonzero()
        start = int(used[0]) if len(used) else self.mask.shape[1]
        self.mask = self.mask[:, start:]
        for layer in self.cache.layers:
            dev = layer.keys.device
            layer.keys = layer.keys[idx.to(dev), :, start:]
            layer.values = layer.values[idx.to(dev), :, start:]
