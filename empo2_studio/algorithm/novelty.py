"""Intrinsic novelty reward (paper §4.3, App. F.2; method.md §2 "Intrinsic reward").

The paper keeps a memory of distinct visited states, separate from the tip memory: "a new state whose
similarity to the stored states is below a threshold is added and rewarded 1/n, n the number of similar
past states". That sentence leaves the count undefined for a state that is new by definition, so this
module fixes one clear, count-based reading:

- The memory holds *prototype* states (unit vectors), each with a visit count.
- A state whose cosine similarity to every prototype is below `threshold` is new: it becomes a
  prototype with count 1 and earns 1/1 = 1.
- Otherwise it is a revisit of its most similar prototype: that prototype's count n grows by one and
  the state earns 1/n (1/2 on the first revisit, 1/3 on the next, …). It is not stored.

So exploring unseen states pays fully and the bonus for circling back decays like a visit count. The
recipe's own variant (1/(1 + number of retrieved tips)) is not used; it has no effect in the merged
recipe code (method.md §2). The trainer decides the memory's scope (per run, per group, or per episode)
and multiplies the reward by `AlgoConfig.intrinsic_coef`.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


class NoveltyReward(Protocol):
    """What the rollout needs of a novelty memory (`NoveltyMemory` implements it).

    The rollout scores the states reached in one lock-step on `copy.deepcopy` copies of the memory, so
    an implementation must deep-copy into an independent memory; then it records each state once by
    calling `reward` on the memory itself. (Not named after the concrete class, which keeps its name:
    trainer checkpoints pickle `NoveltyMemory` instances by their qualified name.)
    """

    def reward(self, vector: np.ndarray) -> float:
        """The bonus of the state embedded as `vector` ((dim,), any non-zero norm); records the visit."""
        ...


class NoveltyMemory:
    """Visited-state prototypes with visit counts; `reward` scores a state and records the visit.

    Args:
        threshold: cosine similarity in [−1, 1] at or above which two states count as the same
            (`AlgoConfig.novelty_threshold`, default 0.9).

    Raises:
        ValueError: threshold outside [−1, 1].
    """

    def __init__(self, threshold: float = 0.9) -> None:
        if not -1.0 <= threshold <= 1.0:
            raise ValueError(f"novelty threshold is a cosine similarity in [-1, 1], got {threshold!r}")
        self.threshold = float(threshold)
        self._states: np.ndarray | None = None  # (n_prototypes, dim), unit rows
        self._counts: list[int] = []

    def __len__(self) -> int:
        """Number of stored prototype states."""
        return len(self._counts)

    @property
    def counts(self) -> tuple[int, ...]:
        """Visit count of each prototype, in insertion order."""
        return tuple(self._counts)

    def reward(self, vector: np.ndarray) -> float:
        """Score a visited state and record the visit.

        Args:
            vector: (dim,) embedding of the state (any non-zero norm; it is L2-normalised here).

        Returns:
            1.0 for a new state (now stored); 1/n for a revisit of a prototype now visited n times.

        Raises:
            ValueError: wrong shape, zero or non-finite vector, or a dimension different from the
                stored states'.
        """
        v = self._unit(vector)
        if self._states is None or len(self._counts) == 0:
            self._states = v[None, :]
            self._counts = [1]
            return 1.0
        sims = self._states @ v  # (n_prototypes,)
        best = int(np.argmax(sims))
        if sims[best] < self.threshold:
            self._states = np.vstack([self._states, v[None, :]])
            self._counts.append(1)
            return 1.0
        self._counts[best] += 1
        return 1.0 / self._counts[best]

    def rewards(self, vectors: np.ndarray) -> list[float]:
        """`reward` of each row of a (k, dim) array, in order (later rows see earlier ones)."""
        return [self.reward(row) for row in np.asarray(vectors)]

    def reset(self) -> None:
        """Forget every stored state."""
        self._states = None
        self._counts = []

    def _unit(self, vector: np.ndarray) -> np.ndarray:
        v = np.asarray(vector, dtype=np.float64)
        if v.ndim != 1:
            raise ValueError(f"a state vector must be 1-D (dim,), got shape {v.shape}")
        if self._states is not None and v.shape[0] != self._states.shape[1]:
            raise ValueError(f"state vector has dim {v.shape[0]}, stored states have dim {self._states.shape[1]}")
        norm = float(np.linalg.norm(v))
        if not np.isfinite(norm) or norm == 0.0:
            raise ValueError("a state vector must be finite and non-zero")
        return v / norm
