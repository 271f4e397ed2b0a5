"""Where an observation says the agent is: the places of each environment and how its text names them.

The structured tip memory (`memory.structure = "structured"`, docs/memory-structure.md) groups tips by
task and place and retrieves inside the group of the agent's place. Which places exist and how an
observation names one is knowledge of the environment's own text, so it lives here, behind
`TextEnv.places(task)` and `TextEnv.place_of(observation)`, never in memory/.

Both worlds name the room the agent stands in with a few fixed sentences:
- the trap: "This room is called the kitchen." (reset, look around) and "You go to the kitchen." (a move);
- ScienceWorld: "This room is called the kitchen." (look around; outdoors "This outside location is
  called the outside."), "You move to the kitchen." (go to) and
  "You teleport to the kitchen." (teleport, the "easy" simplification).
`place_in(text, known)` returns the place of the LAST such sentence in the text (a conversation tail
names several rooms; the last one is where the agent is now), or None when the text names none of
`known` (after "focus on X" the observation says nothing about the room: the caller keeps the place it had).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from empo2_studio.envs.trap_world import SIDE_ROOMS, START_ROOM

TRAP_PLACES: tuple[str, ...] = (START_ROOM, *SIDE_ROOMS)
"""Every room of the trap world (every task and layout uses the same five)."""

SCIENCEWORLD_PLACES: tuple[str, ...] = (
    "art studio", "bathroom", "bedroom", "foundry", "greenhouse", "hallway", "kitchen", "living room",
    "outside", "workshop",
)
"""The ten locations of ScienceWorld's house and yard (the same map in every task)."""

_SENTENCE = re.compile(
    r"(?:This (?:room|outside location) is called the|You go to the|You move to the|You teleport to the)\s+([a-z][a-z ]*?)\s*[.,]",
    re.IGNORECASE,
)


def place_in(text: str, known: Sequence[str]) -> str | None:
    """The last place of `known` that `text` says the agent is in (see the module docstring), or None."""
    if not isinstance(text, str):
        raise ValueError(f"an observation must be a string, got {type(text).__name__}")
    found = [m.group(1).strip().lower() for m in _SENTENCE.finditer(text)]
    for place in reversed(found):
        if place in known:
            return place
    return None
