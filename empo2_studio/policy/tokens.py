"""Conversations in token ids, built from per-message segments, and the action prefix tree.

A conversation's ids are the concatenation of segments: the first user message (with whatever the
chat template puts before it, e.g. a default system message), then for every answered turn the
assistant header ids + the exact sampled `action_ids` + the rest of the end-of-turn ids, then the next
user segment. Past actions are therefore never decoded and re-encoded (paper §1.2 trains on the
tokens that were sampled). The segment texts are probed from the tokenizer's own chat template; when
the probe shows that the template does not render a conversation as the concatenation of its
messages (the "prefix property"), `ChatFormat.packed` is False and callers fall back to rendering each
turn's prompt with the template.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from empo2_studio.policy import Turn

_U1, _A1, _U2, _A2, _U3 = "\x01probe-user-one\x01", "\x01probe-act-one\x01", "\x01probe-user-two\x01", "\x01probe-act-two\x01", "\x01probe-user-three\x01"


def _render(tok: Any, messages: list[dict[str, str]], gen: bool = False) -> str:
    return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)


def _msgs(*contents: str) -> list[dict[str, str]]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": c} for i, c in enumerate(contents)]


@dataclass
class ChatFormat:
    """Segment texts of one tokenizer's chat template and the ids built from them."""

    tokenizer: Any
    packed: bool = True
    first_prefix: str = ""
    user_prefix: str = ""
    user_suffix: str = ""
    header_ids: tuple[int, ...] = ()
    end_ids: tuple[int, ...] = ()
    _cache: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @classmethod
    def probe(cls, tokenizer: Any) -> ChatFormat:
        """Derive the segments from the template with placeholder messages and check that a
        three-turn conversation renders as their concatenation."""
        fmt = cls(tokenizer)
        try:
            a = _render(tokenizer, _msgs(_U1))
            g = _render(tokenizer, _msgs(_U1), gen=True)
            b = _render(tokenizer, _msgs(_U1, _A1))
            c = _render(tokenizer, _msgs(_U1, _A1, _U2))
            first_prefix, first_suffix = a.split(_U1)
            header = g[len(a):]
            after_header = b[len(a) + len(header):]
            end = after_header.split(_A1, 1)[1]
            user_prefix, user_suffix = c[len(b):].split(_U2)
            ok = (
                g.startswith(a)
                and b.startswith(g)
                and after_header.startswith(_A1)
                and c.startswith(b)
                and first_suffix == user_suffix
                and end
            )
            full = _render(tokenizer, _msgs(_U1, _A1, _U2, _A2, _U3), gen=True)
            expect = (
                first_prefix + _U1 + user_suffix
                + header + _A1 + end + user_prefix + _U2 + user_suffix
                + header + _A2 + end + user_prefix + _U3 + user_suffix + header
            )
            ok = ok and full == expect
        except Exception:  # a template that rejects the probe cannot be segmented
            ok = False
        if not ok:
            fmt.packed = False
            fmt.end_ids = fmt.encode(tokenizer.eos_token or "")
            return fmt
        fmt.first_prefix, fmt.user_prefix, fmt.user_suffix = first_prefix, user_prefix, user_suffix
        fmt.header_ids = fmt.encode(header)
        fmt.end_ids = fmt.encode(end)
        return fmt

    def encode(self, text: str) -> tuple[int, ...]:
        ids = self._cache.get(text)
        if ids is None:
            ids = tuple(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            if len(self._cache) < 4096:
                self._cache[text] = ids
        return ids

    @property
    def eot_id(self) -> int:
        """The token that ends an assistant turn (ChatML: <|im_end|>)."""
        return self.end_ids[0]

    def tail_ids(self, action_ids: Sequence[int]) -> tuple[int, ...]:
        """End-of-turn ids that follow an action; an action that already ends with the end-of-turn
        token (constrained decoding, or an EOS stop) only needs the remainder."""
        if action_ids and action_ids[-1] == self.eot_id:
            return self.end_ids[1:]
        return self.end_ids

    def user_ids(self, index: int, text: str) -> tuple[int, ...]:
        prefix = self.first_prefix if index == 0 else self.user_prefix
        return self.encode(prefix + text + self.user_suffix)

    def conversation_ids(self, turns: Sequence[Turn]) -> tuple[list[int], list[tuple[int, int]]]:
        """Ids of the whole conversation and, per turn, the (start, end) span of its action ids.

        A final turn without `action_ids` ends the ids with the assistant header (a sampling prompt)
        and gets no span. Requires `packed`.
        """
        ids: list[int] = []
        spans: list[tuple[int, int]] = []
        for i, turn in enumerate(turns):
            ids.extend(self.user_ids(i, turn.user_text))
            ids.extend(self.header_ids)
            if turn.action_ids is None:
                if i != len(turns) - 1:
                    raise ValueError(f"turn {i} has no action_ids but is not the last turn")
                break
            spans.append((len(ids), len(ids) + len(turn.action_ids)))
            ids.extend(turn.action_ids)
            ids.extend(self.tail_ids(turn.action_ids))
        return ids, spans

    def turn_prompt_ids(self, turns: Sequence[Turn], upto: int) -> list[int]:
        """Fallback for templates without the prefix property: the template's own rendering of the
        prompt of turn `upto` (past actions decoded to text)."""
        msgs: list[dict[str, str]] = []
        for turn in turns[:upto]:
            msgs.append({"role": "user", "content": turn.user_text})
            text = self.tokenizer.decode(list(turn.action_ids or ()), skip_special_tokens=True)
            msgs.append({"role": "assistant", "content": text.strip()})
        msgs.append({"role": "user", "content": turns[upto].user_text})
        return list(self.encode(_render(self.tokenizer, msgs, gen=True)))


class ActionTrie:
    """Prefix tree of the valid actions, each tokenised as assistant content + the end-of-turn id."""

    def __init__(self, sequences: Sequence[Sequence[int]]):
        self.root: dict[int, dict] = {}
        for seq in sequences:
            node = self.root
            for t in seq:
                node = node.setdefault(t, {})

    @classmethod
    def build(cls, fmt: ChatFormat, actions: Sequence[str]) -> ActionTrie:
        if not actions:
            raise ValueError("constrained decoding needs the step's valid actions, got none")
        return cls([fmt.encode(a) + (fmt.eot_id,) for a in actions])

    def masks(self, action_ids: Sequence[int]) -> list[list[int]]:
        """The allowed token ids at every position of `action_ids`; ValueError when it leaves the tree."""
        out, node = [], self.root
        for pos, t in enumerate(action_ids):
            if t not in node:
                raise ValueError(
                    f"action ids {list(action_ids)} leave the valid-action tree at position {pos}: "
                    "they were not sampled with constrained decoding over these valid actions"
                )
            out.append(list(node))
            node = node[t]
        return out
