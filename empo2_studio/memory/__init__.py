"""The tip memory (paper §2): embedders, the LanceDB tip store, and the reflection step that
lets the policy write tips about its own episodes.

    from empo2_studio.memory import TipStore, make_embedder
    store = TipStore.open(session.tips_path, make_embedder(cfg.memory.embedder), cfg.memory)
    tips = store.retrieve(task, variation, conversation_text)       # list[RetrievedTip]
    store.add_episode_tips(episode, tip_text, key_text)             # one entry per distinct step action

Importing this package does not import torch; the MiniLM embedder loads it on first use.
"""

from empo2_studio.memory.embedder import Embedder, HashEmbedder, MiniLMEmbedder, make_embedder
from empo2_studio.memory.records import MAX_KEY_CHARS, MAX_TIP_CHARS
from empo2_studio.memory.tip_store import (
    REEMBED_COMMAND,
    EmbedderMismatchError,
    ImportResult,
    TableVersion,
    TipMemory,
    TipStore,
    entry_text,
)

__all__ = [
    "Embedder",
    "EmbedderMismatchError",
    "HashEmbedder",
    "ImportResult",
    "MAX_KEY_CHARS",
    "MAX_TIP_CHARS",
    "MiniLMEmbedder",
    "TipMemory",
    "REEMBED_COMMAND",
    "TableVersion",
    "TipStore",
    "entry_text",
    "make_embedder",
]
