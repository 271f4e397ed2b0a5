"""The tip memory (paper §2): embedders, the LanceDB tip store, and the reflection step that
lets the policy write tips about its own episodes.

    from empo2_studio.memory import TipStore, make_embedder
    store = TipStore.open(session.tips_path, make_embedder(cfg.memory.embedder), cfg.memory)
    tips = store.retrieve(task, variation, conversation_text)       # list[RetrievedTip]
    store.add_episode_tips(episode, tip_text, key_text)             # one entry per distinct step action

`open_tip_store` opens the memory `MemoryConfig.structure` names: the flat `TipStore` (paper §2), or the
`StructuredTipStore` of docs/memory-structure.md beside it. Importing this package does not import
torch; the MiniLM embedder loads it on first use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from empo2_studio.config import EnvConfig, MemoryConfig

from empo2_studio.memory.embedder import Embedder, HashEmbedder, MiniLMEmbedder, make_embedder
from empo2_studio.memory.grouped_store import StructuredTipStore, structured_path
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



def open_tip_store(
    path: str | Path, embedder: Embedder, cfg: MemoryConfig | None = None, *, env: EnvConfig | None = None,
    world: Any = None, verify_embedder: bool = True,
) -> TipStore:
    """The session's tip memory as `cfg.structure` says: the flat `TipStore` at `path`, or (structured
    and its experiment arms, `memory.structure.ARMS`) the `StructuredTipStore` at `structured_path(path)` whose places come from `world` (any object with
    `places(task)` and `place_of(text)`, e.g. a `TextEnv`) or else from the environment `env` names
    (its catalogue only: no JVM starts)."""
    cfg = cfg or MemoryConfig()
    if cfg.structure == "flat":
        return TipStore.open(path, embedder, cfg, verify_embedder=verify_embedder)
    if world is None and env is not None:
        from empo2_studio.envs import make_env

        world = make_env(env)
    return StructuredTipStore.open(structured_path(path), embedder, cfg, world=world, verify_embedder=verify_embedder)


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
    "StructuredTipStore",
    "TableVersion",
    "TipStore",
    "entry_text",
    "make_embedder",
    "open_tip_store",
    "structured_path",
]
