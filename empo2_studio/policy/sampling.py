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

Host ↔ device traffic per decoding position, whatever the number of episodes: the forward's inputs
go up as one packed tensor and the allowed-token masks of all drawn rows as another (both non-blocking
on CUDA: `batch_cache.upload`); masking, log-softmax, argmax or multinomial and the gather of the
chosen log-probs run on the model's device (`draw_rows`), and the chosen tokens with their log-probs
come back in one transfer — the one point per position where the host waits for the device, since
the next position's trie node depends on the token.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from empo2_studio.policy.batch_cache import BatchState, plain_layers, upload
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
        x = upload(torch.tensor([list(new_ids)]), self.device)
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
            tok, lp = row.forced() or draw_rows(state.logits[None], None, [row.node], temperature, generator)[0]
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
        try:
            # The batch takes over the episodes' caches (emptied layer by layer as it copies them) and
            # `_finish` gives each episode its cache back.
            batch = BatchState(states, range(len(states)), config, self.device)
            for st in states:
                st.cache = None
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
            drawn = [b for b, i in enumerate(live) if rows[i].forced() is None]
            picks = iter(draw_rows(logits, drawn, [rows[live[b]].node for b in drawn], temperature, generator) if drawn else [])
            done = []
            for b, i in enumerate(live):
                tok, lp = rows[i].forced() or next(picks)
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
        """One token after `logits` (V,): `draw_rows` for a single row."""
        return draw_rows(logits[None], None, [node], temperature, generator)[0]


def draw_rows(
    logits: torch.Tensor,
    select: Sequence[int] | None,
    nodes: Sequence[dict | None],
    temperature: float,
    generator: torch.Generator,
) -> list[tuple[int, float]]:
    """One token per drawn row, on the logits' device, with one transfer back.

    `logits` (B, V) on the model's device; `select`: the rows to draw (None = all B), one trie node
    each in `nodes` (None = free: every token allowed). Each row samples from softmax(logits / T)
    masked to its node's tokens (T = 0: argmax of log_softmax(logits), its log-prob at T = 1).
    Returns [(token, its log-prob)] per drawn row. The random draw takes `generator` (the policy's,
    on the CPU) on a CPU device — the same stream as one multinomial per row; on a GPU a device
    generator seeded from it (one CPU draw per call, no device sync).
    """
    device = logits.device
    n = len(nodes)
    constrained = [r for r, node in enumerate(nodes) if node is not None]
    pack = list(select) if select is not None and list(select) != list(range(logits.shape[0])) else []
    rows = [r for r in constrained for _ in nodes[r]]  # type: ignore[union-attr]
    cols = [t for r in constrained for t in nodes[r]]  # type: ignore[union-attr]
    if pack or rows:
        flat = upload(torch.tensor(pack + rows + cols + [int(nodes[r] is None) for r in range(n)], dtype=torch.long), device)
        if pack:
            logits = logits.index_select(0, flat[: len(pack)])
        if rows:
            k = len(pack)
            allowed = torch.zeros_like(logits, dtype=torch.bool)
            allowed[flat[k : k + len(rows)], flat[k + len(rows) : k + 2 * len(rows)]] = True
            allowed |= flat[k + 2 * len(rows) :].bool()[:, None]  # free rows allow every token
            logits = logits.masked_fill(~allowed, float("-inf"))
    if temperature <= 0:
        logp = torch.log_softmax(logits, dim=-1)
        tok = torch.argmax(logp, dim=-1)
    else:
        logp = torch.log_softmax(logits / temperature, dim=-1)
        tok = torch.multinomial(logp.exp(), 1, generator=_generator_on(device, generator)).squeeze(1)
    lp = logp.gather(1, tok[:, None]).squeeze(1)
    toks, lps = torch.stack([tok.double(), lp.double()]).tolist()
    return [(int(t), lp) for t, lp in zip(toks, lps)]


_DEVICE_GENERATORS: dict[torch.device, torch.Generator] = {}


def _generator_on(device: torch.device, generator: torch.Generator) -> torch.Generator:
    """`generator` itself on its own device; else the device's generator, reseeded from `generator`."""
    if device == generator.device or device.type == "cpu":
        return generator
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))  # a CPU draw: no device sync
    gen = _DEVICE_GENERATORS.setdefault(device, torch.Generator(device))
    return gen.manual_seed(seed)
