"""Reading a task description: what it says to focus on, the tool it names, the action that finishes it.

Both environments word their tasks as ScienceWorld does ("Your task is to turn on the red light bulb.
First, focus on the red light bulb. Then, turn it on."), so these readers serve both: the prompt lists
the focus targets (`policy.prompts`), and the record line plans with all three (`envs.room_notes`).
"""

from __future__ import annotations

import re

PLAN_SEPARATOR = ", then "
"""How a note's plan joins its steps: curated tips (`TrapEnv.curated_tip`) and record lines
(`envs.room_notes.record_line`, `envs.sw_search`) all write "…: go to kitchen, then focus on X, then turn on X";
`policy.prompts.remaining_plan` cuts a plan at it."""

_FOCUS = re.compile(r"focus on (?:the |a |an )?(.+?)(?=[.,;:!?]|\s+(?:and|then)\s|$)", re.IGNORECASE)
_THEN = re.compile(
    r"\bThen,?\s+(\w+) it(?: (on|off|up|down|in|out))?(?:\s+with\b[^.]*)?\s*(?:\.|$)", re.IGNORECASE
)
_WITH = re.compile(r"\bThen,?\s+\w+ it\b[^.]*?\bwith (?:the |a |an )?([^.]+?)\s*(?:\.|$)", re.IGNORECASE)


def focus_items(task_description: str) -> tuple[str, ...]:
    """The objects the task says to focus on, in order, without duplicates.

    >>> focus_items("Your task is to find the red bulb. First, focus on the red bulb. Then, pick it up.")
    ('red bulb',)
    """
    seen: dict[str, None] = {}
    for m in _FOCUS.finditer(task_description):
        seen.setdefault(m.group(1).strip(), None)
    return tuple(k for k in seen if k)


def tool_of(task_description: str) -> str:
    """The object the description's "Then, <verb> it with the <tool>." sentence names; "" when none.

    >>> tool_of("Your task is to water the red flower. Then, water it with the watering can.")
    'watering can'
    >>> tool_of("Your task is to turn on the red light bulb. Then, turn it on.")
    ''
    """
    m = _WITH.search(task_description)
    return m.group(1).strip() if m else ""


def finishing_action(task_description: str, target: str) -> str:
    """The action that finishes the task after the focus, in the valid actions' verb-object wording,
    read from the description's "Then, <verb> it [particle] [with …]." sentence; "" when it has none
    or another form (ScienceWorld's "Then, move it to the red box …" names a second object).

    >>> finishing_action("Your task is to find the frog. First, focus on the frog. Then, pick it up.", "frog")
    'pick up frog'
    >>> finishing_action("Your task is to water the red flower. Then, water it with the watering can.", "red flower")
    'water red flower'
    """
    m = _THEN.search(task_description)
    if not m:
        return ""
    verb, particle = m.group(1).lower(), m.group(2)
    return f"{verb} {particle.lower()} {target}" if particle else f"{verb} {target}"
