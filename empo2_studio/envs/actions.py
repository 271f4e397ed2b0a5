"""Action correction: map the agent's free text to one valid action (method.md §3 "Action handling").

The paper's recipe executes the valid action with the highest Jaccard word overlap when the model's
text is not itself valid, and keeps the original text in the chat history. Both environments call
`correct_action` so the two share one rule.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_WORD = re.compile(r"\w+")


def normalize(text: str) -> str:
    """Lower-case, strip, and collapse runs of whitespace to one space."""
    return " ".join(text.lower().split())


def words(text: str) -> frozenset[str]:
    """The set of lower-case word tokens of `text` (punctuation dropped: "kitchen." → "kitchen")."""
    return frozenset(_WORD.findall(text.lower()))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """|a ∩ b| / |a ∪ b| in 0 … 1 (0 when both are empty)."""
    union = a | b
    return len(a & b) / len(union) if union else 0.0


def correct_action(text: str, valid_actions: Sequence[str]) -> tuple[str, bool, bool]:
    """Map `text` to the valid action to execute.

    Returns `(action, corrected, invalid)`:
    - an exact match after `normalize` wins (e.g. "  Go to  Kitchen" → "go to kitchen");
    - otherwise the valid action with the highest Jaccard word overlap; ties (including all-zero
      overlap) go to the first action in sorted order, so the result never depends on list order;
    - `corrected` is True when `action` differs from `text.strip()`;
    - empty or whitespace-only `text`, or no valid actions, gives `("", False, True)`: invalid,
      nothing is to be executed.
    """
    stripped = text.strip()
    if not stripped or not valid_actions:
        return "", False, True
    candidates = sorted(set(valid_actions))
    target = normalize(stripped)
    for action in candidates:
        if normalize(action) == target:
            return action, action != stripped, False
    text_words = words(stripped)
    # max() keeps the first maximum, and candidates are sorted: deterministic tie-break.
    best = max(candidates, key=lambda a: jaccard(text_words, words(a)))
    return best, best != stripped, False
