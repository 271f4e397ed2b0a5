"""Action correction (method.md §3): exact match after normalising, else highest Jaccard overlap."""

import pytest

from empo2_studio.envs.actions import correct_action, jaccard, words

VALID = (
    "go to kitchen",
    "go to workshop",
    "focus on red light bulb",
    "turn on red light bulb",
    "look around",
    "pick up watering can",
)

# (text, expected action, corrected, invalid); overlaps worked out by hand in the comments.
TABLE = [
    ("go to kitchen", "go to kitchen", False, False),  # exact
    ("  Go  to   Kitchen ", "go to kitchen", True, False),  # exact after strip/collapse/lower
    ("go kitchen", "go to kitchen", True, False),  # 2/3 vs "go to workshop" 1/4
    ("turn on the red light bulb", "turn on red light bulb", True, False),  # 5/6 vs focus… 4/7
    ("red light bulb", "focus on red light bulb", True, False),  # 3/5 tie with turn on…: sorted first
    ("look around.", "look around", True, False),  # punctuation dropped: 2/2
    ("pick up the can", "pick up watering can", True, False),  # 3/5; "turn on…" 0, "go to…" 0
    ("xyzzy", "focus on red light bulb", True, False),  # all 0: first in sorted order
    ("", "", False, True),  # empty: invalid, nothing executed
    ("   \n\t", "", False, True),  # whitespace only
]


@pytest.mark.parametrize(("text", "action", "corrected", "invalid"), TABLE)
def test_correct_action_table(text, action, corrected, invalid):
    assert correct_action(text, VALID) == (action, corrected, invalid)


def test_tie_break_does_not_depend_on_list_order():
    assert correct_action("red light bulb", tuple(reversed(VALID)))[0] == "focus on red light bulb"
    assert correct_action("xyzzy", tuple(reversed(VALID)))[0] == "focus on red light bulb"


def test_no_valid_actions_is_invalid():
    assert correct_action("look around", ()) == ("", False, True)


def test_jaccard_values():
    assert jaccard(words("go to kitchen"), words("go kitchen")) == pytest.approx(2 / 3)
    assert jaccard(words("a b"), words("c d")) == 0.0
    assert jaccard(frozenset(), frozenset()) == 0.0
