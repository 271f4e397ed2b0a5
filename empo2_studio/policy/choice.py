"""Whole-action choice (`policy.decoding = "action"`): the step's action is drawn from a categorical over
its valid actions, scored by the free model (as TWOSOME, GLAM and POAD score whole actions).

For a step with prompt ids `p` and valid actions a_1 … a_K, each candidate is the token sequence the
action would be recorded as, c_k = encode(a_k) + <end of turn> (what constrained decoding samples).
Its score is the free model's summed log-prob at temperature 1,

    s_k = Σ_j log softmax(logits(p, c_k[:j]))[c_k[j]]        (every token over the whole vocabulary),

normalised by `ChoiceSettings.norm`: "token" (÷ len(c_k)), "word" (÷ the action's word count) or
"sum" (as is, GLAM). With `pmi`, the same normalised score under a neutral prompt (`NEUTRAL_PROMPT`,
domain-conditional PMI, Holtzman et al. 2021) is subtracted, without gradient: it calibrates the
preference of summed scores for short, frequent actions. The policy is π(k) = softmax(z / T)[k], T
the episode's sampling temperature (greedy T = 0: the argmax, log-probs at T = 1).

Token layout. The candidates of a step share its prompt: they are fed as one block after it, each
attending to the prompt and to its own earlier tokens only (a 4-D attention mask, position ids
restarting after the prompt for each candidate), so a step costs one forward of Σ_k (len(c_k) − 1)
new tokens on top of the prompt's KV cache, which is then cropped back. The prompt's last logits
predict every candidate's first token. This is the cache-sharing of a batch of continuations without
copying the cache K times.

Recorded and re-scored shapes. `ActionSample.token_ids` = c_k of the chosen action, and
`ActionSample.logprobs` = (log π(k),): ONE value per action, the categorical's, not one per token.
`score` returns per turn a 1-element tensor, log π(k) recomputed on the conversation it is given
(packed: one forward per conversation, the conversation's ids followed by every turn's candidate block,
block t attending to the conversation up to turn t's action); with grad enabled, gradients flow into
every candidate's score, i.e. the whole categorical. The update's per-token machinery (ratio, clip,
δ mask, `loss_agg`) then sees one "token" per turn, which is PPO on the action categorical. With
unchanged weights a re-score at the sampling temperature returns the behaviour log-prob (ratio 1).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from empo2_studio.config import CHOICE_NORMS
from empo2_studio.policy import Turn, logprob_temperature

NORMS = CHOICE_NORMS
NEUTRAL_PROMPT = "Choose an action."
"""The user message of the PMI prior's prompt: no task, no room, no notes."""


@dataclass(frozen=True)
class ChoiceSettings:
    norm: str = "word"
    """How a candidate's summed log-prob is normalised: "word", "token" or "sum" (none)."""
    pmi: bool = False
    """Subtract the candidate's normalised score under `NEUTRAL_PROMPT` (domain-conditional PMI)."""

    def __post_init__(self) -> None:
        if self.norm not in NORMS:
            raise ValueError(f"policy.choice_norm must be one of {list(NORMS)}, got {self.norm!r}")


def candidates(fmt: Any, actions: Sequence[str]) -> list[tuple[int, ...]]:
    """Token ids of each valid action as it would be recorded: encode(action) + end-of-turn id."""
    if not actions:
        raise ValueError("action decoding needs the step's valid actions, got none")
    return [tuple(fmt.encode(a)) + (fmt.eot_id,) for a in actions]


def tree_logprobs(
    model: Any, base: Sequence[int], groups: Sequence[tuple[int, Sequence[Sequence[int]]]], *,
    cache: Any = None, cached: int = 0,
) -> list[list[torch.Tensor]]:
    """Per-token log-probs (temperature 1, whole vocabulary) of candidate continuations, one forward.

    `base`: ids (L,); `groups`: (s, cands) pairs — candidate c continues `base[:s]` (1 ≤ s ≤ L).
    `cache`: a KV cache already holding `base[:cached]` (then only the rest and the blocks are fed; the
    cache is cropped back to L afterwards). Returns per group, per candidate, a (len(c),) tensor;
    differentiable when grad is enabled. The blocks follow `base` in the input, with a 4-D additive mask
    (1, 1, Q, cached + Q) and explicit position ids.
    """
    L = len(base)
    ids = list(base[cached:])
    pos = list(range(cached, L))
    owner_start: list[int] = []  # per block token: the absolute index of its candidate's first block token
    limit: list[int] = []  # per block token: how many base ids it may see
    rows: list[list[list[int]]] = []  # per group, per candidate: absolute row whose logits predict token j
    for s, cands in groups:
        if not 1 <= s <= L:
            raise ValueError(f"a candidate group continues base[:{s}], outside 1…{L}")
        g_rows = []
        for c in cands:
            start = L + len(owner_start)
            r = [s - 1]
            for j, tok in enumerate(c[:-1]):
                ids.append(tok)
                pos.append(s + j)
                owner_start.append(start)
                limit.append(s)
                r.append(start + j)
            g_rows.append(r)
        rows.append(g_rows)
    n_new, total = len(ids), cached + len(ids)
    allowed = torch.zeros(n_new, total, dtype=torch.bool)
    allowed[: L - cached, :L] = torch.ones(L - cached, L, dtype=torch.bool).tril(diagonal=cached)  # the base: causal
    for b, (start, lim) in enumerate(zip(owner_start, limit)):
        q = L - cached + b
        allowed[q, :lim] = True
        allowed[q, start : L + b + 1] = True
    device = next(model.parameters()).device
    dtype = next(p for p in model.parameters() if p.is_floating_point()).dtype
    mask = torch.zeros(n_new, total, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    flat = sorted({r for g in rows for c in g for r in c})
    where = {r: i for i, r in enumerate(flat)}
    out = model(
        input_ids=torch.tensor([ids], device=device),
        attention_mask=mask[None, None].to(device),
        position_ids=torch.tensor([pos], device=device),
        cache=cache,
        use_cache=cache is not None,
        logits_to_keep=torch.tensor([r - cached for r in flat], dtype=torch.long, device=device),
    )
    logp = torch.log_softmax(out.logits[0].float(), dim=-1)
    if cache is not None:
        cache.crop(-(total - L))  # drop the candidate blocks: the cache holds base again
    result = []
    for g_rows, (_, cands) in zip(rows, groups):
        result.append([
            logp[[where[r] for r in r_list], list(c)] for r_list, c in zip(g_rows, cands)
        ])
    return result


def normalised(token_logps: Sequence[torch.Tensor], actions: Sequence[str], norm: str) -> torch.Tensor:
    """(K,) candidate scores: summed log-probs ÷ token count, ÷ word count, or as is (`norm`)."""
    sums = torch.stack([lp.sum() for lp in token_logps])
    if norm == "token":
        return sums / torch.tensor([len(lp) for lp in token_logps], dtype=sums.dtype, device=sums.device)
    if norm == "word":
        return sums / torch.tensor([max(len(a.split()), 1) for a in actions], dtype=sums.dtype, device=sums.device)
    return sums


def categorical(z: torch.Tensor, temperature: float) -> torch.Tensor:
    """(K,) log π = log softmax(z / T); T is already `logprob_temperature`-resolved (> 0)."""
    return torch.log_softmax(z / temperature, dim=-1)


class Chooser:
    """Whole-action sampling and scoring for an `HFPolicy` (its model, chat format, sampler, generator)."""

    def __init__(self, policy: Any, settings: ChoiceSettings):
        self.policy = policy
        self.settings = settings

    def logits(self, token_logps: Sequence[torch.Tensor], actions: Sequence[str]) -> torch.Tensor:
        """(K,) the categorical's logits z (before ÷ T): normalised scores, PMI-calibrated if set."""
        z = normalised(token_logps, actions, self.settings.norm)
        if self.settings.pmi:
            z = z - self.prior(actions).to(z.device)
        return z

    @torch.no_grad()
    def prior(self, actions: Sequence[str]) -> torch.Tensor:
        """(K,) the normalised scores under the neutral prompt (no gradient; current weights)."""
        fmt = self.policy.chat_format
        base = fmt.conversation_ids([Turn(NEUTRAL_PROMPT, None)])[0]
        (lps,) = tree_logprobs(self.policy.model, base, [(len(base), candidates(fmt, actions))])
        return normalised(lps, actions, self.settings.norm)

    @torch.no_grad()
    def sample(self, requests: Sequence[Any], temperature: float) -> list[tuple[tuple[int, ...], float]]:
        """Per request: (chosen candidate ids, log π(chosen)) at `temperature` (0 = argmax, logged at T 1).
        One forward per episode: the prompt's uncached ids and its candidate block on the episode's cache."""
        pol = self.policy
        keys = [r.key for r in requests]
        prompts = [pol.prompt_ids(r.turns) for r in requests]
        states = pol.sampler.prepare(keys, prompts, feed=False)
        seen: set[int] = set()
        for st in states:  # fresh episodes share the prefix's cache object: each owns a copy before any feed
            if id(st.cache) in seen:
                st.cache = copy.deepcopy(st.cache)
            seen.add(id(st.cache))
        out = []
        for st, prompt, req in zip(states, prompts, requests):
            actions = req.turns[-1].valid_actions
            cands = candidates(pol.chat_format, actions)
            (lps,) = tree_logprobs(pol.model, prompt, [(len(prompt), cands)], cache=st.cache, cached=len(st.ids))
            pol.sampler.tokens_processed += len(prompt) - len(st.ids) + sum(len(c) - 1 for c in cands)
            st.ids = list(prompt)
            logp = categorical(self.logits(lps, actions), logprob_temperature(temperature))
            if temperature <= 0:
                k = int(torch.argmax(logp))
            else:
                k = int(torch.multinomial(logp.exp().cpu(), 1, generator=pol.generator))
            out.append((cands[k], float(logp[k])))
        return out

    def score(self, conversations: Sequence[Sequence[Any]], temps: Sequence[float]) -> list[list[torch.Tensor]]:
        """Per conversation, per turn, a (1,) tensor: log π(the turn's action) in its step's categorical at
        the conversation's temperature (already resolved). Packed formats: one forward per conversation;
        otherwise one per turn. ValueError when a turn's action is not one of its valid actions' candidates."""
        pol = self.policy
        fmt = pol.chat_format
        model = pol.train_forward if (torch.is_grad_enabled() and pol.train_forward is not None) else pol.model
        out = []
        for conv, temp in zip(conversations, temps):
            cands = [candidates(fmt, t.valid_actions) for t in conv]
            chosen = [_index(c, t.action_ids, i) for i, (c, t) in enumerate(zip(cands, conv))]
            if fmt.packed:
                ids, spans = fmt.conversation_ids(conv)
                with pol._checkpointing():
                    per_turn = tree_logprobs(model, ids, [(s, c) for (s, _), c in zip(spans, cands)])
            else:
                per_turn = []
                for t in range(len(conv)):
                    prompt = pol.prompt_ids(list(conv[:t]) + [Turn(conv[t].user_text, None, conv[t].valid_actions)])
                    with pol._checkpointing():
                        per_turn += tree_logprobs(model, prompt, [(len(prompt), cands[t])])
            rows = []
            for lps, turn, k in zip(per_turn, conv, chosen):
                logp = categorical(self.logits(lps, turn.valid_actions), temp)
                rows.append(logp[k : k + 1])
            out.append(rows)
        return out


def _index(cands: Sequence[tuple[int, ...]], action_ids: Sequence[int] | None, turn: int) -> int:
    ids = tuple(action_ids or ())
    for k, c in enumerate(cands):
        if c == ids:
            return k
    raise ValueError(
        f"turn {turn}: action ids {list(ids)} are none of the step's valid actions (+ end of turn): "
        "they were not sampled with action decoding over these valid actions"
    )
