"""Embedders: the hash fake's determinism and similarity; the real MiniLM (slow) ranks similar tips first."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from empo2_studio.config import MemoryConfig
from empo2_studio.memory import HashEmbedder, TipStore, make_embedder
from empo2_studio.memory import embedder as embedder_module


def test_hash_embedder_unit_rows_and_similarity():
    e = make_embedder("hash")
    v = e.embed(["connect the red wire to the battery", "connect red wire to battery", "the kitchen has a fridge", ""])
    assert v.shape == (4, 256) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-6)
    sims = v @ v.T
    assert sims[0, 1] > 0.6 and abs(sims[0, 2]) < 0.3
    assert e.embed([]).shape == (0, 256)


def test_hash_embedder_is_deterministic_across_processes():
    # load embedder.py alone (numpy + hashlib) so the child starts fast; a fresh process has another
    # str-hash salt, which a Python-hash()-based fake would fail on
    code = ("import importlib.util as u, sys; s = u.spec_from_file_location('emb', sys.argv[1]); m = u.module_from_spec(s);"
            "s.loader.exec_module(m); print(m.HashEmbedder().embed(['open the door'])[0][:8].tolist())")
    path = embedder_module.__file__
    out = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, check=True).stdout
    assert eval(out) == HashEmbedder().embed(["open the door"])[0][:8].tolist()


def test_bad_embedder_inputs():
    with pytest.raises(ValueError, match="unknown embedder 'bert'.*'minilm', 'hash'"):
        make_embedder("bert")
    with pytest.raises(TypeError):
        HashEmbedder().embed("a single string")
    with pytest.raises(TypeError):
        HashEmbedder().embed(["ok", 3])


@pytest.mark.slow
def test_minilm_offline_similar_tips_rank_above_unrelated(tmp_path):
    e = make_embedder("minilm")
    assert (e.name, e.dim) == ("minilm", 384)
    v = e.embed(["The red wire connects the battery to the light bulb.", "Wire the battery to the bulb"])
    assert v.shape == (2, 384)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    # the similarity rule alone: hand-added tips are not pinned here (pinning is tested in test_memory_tip_store)
    store = TipStore.open(tmp_path / "tips.lance", e, MemoryConfig(similarity_threshold=-1.0, top_k=3, pin_curated=False))
    related = "connect the battery to the light bulb with the red wire"
    for text in (related, "the thermometer measures the boiling point of water", "plant the seed in the flower pot"):
        store.add_tip("power-component", 0, text, score=0)  # equal scores: order falls to similarity
    hits = store.search("wire the battery to the bulb", limit=3)
    assert hits[0][0].text == related and hits[0][1] > 0.5 > hits[1][1]
    got = store.retrieve("power-component", 0, "wire the battery to the bulb")
    assert got[0].text == related
    store.cfg = MemoryConfig(pin_curated=False)  # default threshold 0.5: only the related tip survives
    assert [t.text for t in store.retrieve("power-component", 0, "wire the battery to the bulb")] == [related]
