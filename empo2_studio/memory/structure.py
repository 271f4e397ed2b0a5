"""The rules of the structured tip memory (`memory.structure = "structured"`), as pure functions.

No database here: `grouped_store.py` reads a group's rows from LanceDB and asks these functions what to
show, merge, retire and evict, so every rule is tested with hand-worked numbers (tests/test_memory_structure.py).

Groups. A tip belongs to one group: (task, variation, place). The place is the room the observation
showed when the tip's step was played (`TextEnv.place_of`); `ANYWHERE` holds tips that show no place
(a teacher's tip keyed by its own text, a flat row whose key names no room); they are about the task as
a whole, so they are retrieved beside every place's group. The variation stays in the group as it stays
in the flat partition (paper §2: one memory per variation). No similarity threshold applies inside a
group: the group is the filter, similarity only orders. A teacher's tip (`teachers_tip`) is shown first
whatever its similarity while `MemoryConfig.pin_curated` is on, as in the flat memory (`shown_first`).

Rank (retrieval inside the group of where the agent is):

    rank = similarity + λ · (helped + 1) / (used + 2)

similarity: cosine between the step's query and the tip's key (−1 … 1); used: episodes that were shown
the tip; helped: those of them that beat their group's running mean score (`helped_now`; the
flat-rotate-source arm: that scored at least the tip's source episode, `reproduced`); λ =
`StructureRules.count_weight` (0.5). The fraction is the helped rate with one imagined help and one
imagined miss (Laplace), so a new tip starts at ½ and a tip needs a few readings before its counts
outweigh a similarity gap: at λ = 0.5 the count term moves the rank by at most 0.5. Pinned tips (a
teacher's pick) come first, then (`wins_first`) tips of won episodes, then rank descending, ties newer
first; `max_shown` (MemoryConfig.top_k) are shown.

Score order (`StructureRules.score_order`, the `flat-rotate` arms): the flat memory's order (the source
episode's score, descending; ties by higher similarity, then newer) in place of `rank`, except that a tip
that did not help its readers (`unhelpful`: helped < used / 2, i.e. a Laplace rate below ½, with helped as
`helped_by` says) goes behind every tip that helped or was never read. A note that helps keeps its place;
one that does not gives way to the next, so a stalled search rotates while a found plan stays in front.

Writing a tip into its group (`placement`), against the group's live (not retired) tips, with `text_sim`
the cosine between the tip TEXTS' embeddings:
- exact duplicate (same text) → merged into the existing tip;
- near duplicate: text_sim ≥ `near_duplicate` (0.95) and the same outcome → merged;
- contradiction: text_sim ≥ `contradiction` (0.80) and the opposite outcome (outcome: the source episode
  scored > 0, or not) → the better record (`record`: the helped rate with the source episode counted as
  the first reading) stays, the other is retired; ties go to the newer tip;
- otherwise added.
A teacher's tip (`teachers_tip`: pinned, added by hand, edited, or imported without a source episode) is
never merged into or retired by these rules, and a new one is always added (the store refuses an exact
duplicate). Merging sums `used` and `helped` into the kept tip, keeps the better of the two source scores (a
won episode's near duplicate of a note that scored less makes it a won note) and appends the merged tip's
source episode to its `merged_sources`; the kept text is never rewritten. After an add, a group over
`max_stored` live tips retires the worst (`evict`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from empo2_studio.memory.records import is_curated
from empo2_studio.types import WIN_SCORE

ANYWHERE = "anywhere"
"""The group of tips that show no place; retrieved beside the group of whatever place the agent is in."""


@dataclass(frozen=True)
class StructureRules:
    count_weight: float = 0.5
    """λ in rank = similarity + λ · (helped + 1) / (used + 2)."""
    near_duplicate: float = 0.95
    """Text cosine at or above which two tips of one group with the same outcome are one tip (merged)."""
    contradiction: float = 0.80
    """Text cosine at or above which two tips of one group with opposite outcomes contradict."""
    max_stored: int = 50
    """Live (not retired) tips kept per group; the worst record is retired beyond it."""
    by_place: bool = True
    """Group by place; False files every tip under ANYWHERE (one group per variation, as the flat memory)."""
    threshold: bool = False
    """Show only tips whose similarity is above `MemoryConfig.similarity_threshold` (the flat rule; pinned
    tips exempt). Off in a place's group: the group is the filter."""
    wins_first: bool = False
    """Tips whose source episode won (score ≥ `types.WIN_SCORE`) come before every other unpinned tip,
    whatever their rank: a solution stays in front while the other notes rotate by their counts."""
    helped_by: Literal["mean", "source"] = "mean"
    """When a reader counts as helped: "mean", its score beat the group's running mean (`helped_now`);
    "source", it scored at least the tip's own source episode, and above 0 (`reproduced`: the note's record
    held). Only the counts change: `record` (contradictions, eviction) still counts the source episode as
    one more reading helped when it scored above 0, and a merge still keeps the better source score (the
    arms that use "source" merge exact duplicates only and cap at 1000)."""
    score_order: bool = False
    """Order by the source episode's score (the flat memory's order) instead of `rank`, tips that did not
    help their readers (`unhelpful`) behind the rest (module docstring, "Score order")."""
    random_order: bool = False
    """Show a random sample of the group's live tips instead of the best ranked (the "does the content
    matter?" arm); seeded by the query, so a replay shows the same sample."""

    def __post_init__(self) -> None:
        if self.helped_by not in ("mean", "source"):
            raise ValueError(f"helped_by must be 'mean' or 'source', got {self.helped_by!r}")


ARMS: dict[str, StructureRules] = {
    "structured": StructureRules(),
    "groups": StructureRules(count_weight=0.0, near_duplicate=2.0, contradiction=2.0),
    "flat-counts": StructureRules(near_duplicate=2.0, contradiction=2.0, max_stored=1000, by_place=False, threshold=True),
    "structured-random": StructureRules(random_order=True),
    "flat-counts-wins": StructureRules(near_duplicate=2.0, contradiction=2.0, max_stored=1000, by_place=False, threshold=True,
                                       wins_first=True),
    "flat-rotate": StructureRules(near_duplicate=2.0, contradiction=2.0, max_stored=1000, by_place=False, threshold=True,
                                  score_order=True),
    "flat-rotate-source": StructureRules(near_duplicate=2.0, contradiction=2.0, max_stored=1000, by_place=False,
                                         threshold=True, score_order=True, helped_by="source"),
}
"""The rules of each non-flat `memory.structure` (issue 49's experiment arms, item 2):
structured: the full design; groups: groups by place, rank = similarity alone, no merge or contradiction
(exact duplicates still merge, as the flat memory skips them); flat-counts: one group per variation, the flat
threshold, rank = similarity + counts, the flat cap of 1000; structured-random: the full design showing a
random sample of the group (same count); flat-counts-wins: flat-counts with won notes first (ScienceWorld's
search, docs/notebook/2026-12-07-sw-memory-arms.md); flat-rotate: flat-counts' store in the flat memory's score
order, unhelpful tips behind, and flat-rotate-source the same with a reader helped only when it scored at
least the note's own episode (docs/notebook/2026-12-07-sw-flat-rotate.md). A cosine never reaches 2.0, so
those rules never fire."""


@dataclass(frozen=True)
class Placement:
    """What writing one tip into its group does."""

    kind: Literal["add", "merge", "contradiction"]
    target: str = ""
    """merge: the tip it merges into; contradiction: the tip it contradicts."""
    winner: Literal["new", "old", ""] = ""
    """contradiction: which of the two stays live."""
    similarity: float = 0.0


@dataclass(frozen=True)
class GroupSummary:
    """One group as the studio's Tips tab shows it."""

    task: str
    variation: int
    place: str
    tips: int
    """Live tips (retired ones not counted)."""
    retired: int
    pinned: int
    episodes: int
    """Episodes that read a tip of the group (the running mean's count)."""
    mean_score: float
    best: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    """The best live tips by record: {"id", "text", "used", "helped", "pinned"}."""

    @property
    def label(self) -> str:
        return group_label(self.task, self.variation, self.place)


def group_label(task: str, variation: int, place: str) -> str:
    """"power-component · v0 · kitchen": what a group is about, in one line."""
    return f"{task} · v{variation} · {place}"


def rate(used: int, helped: int) -> float:
    """The smoothed helped rate (helped + 1) / (used + 2): ½ for a tip never read."""
    return (helped + 1) / (used + 2)


def rank(similarity: float, used: int, helped: int, count_weight: float) -> float:
    """rank = similarity + λ · (helped + 1) / (used + 2) (module docstring)."""
    return similarity + count_weight * rate(used, helped)


def outcome(score: float) -> int:
    """+1 when the source episode scored above 0, else −1 (0: nothing achieved counts as a miss)."""
    return 1 if score > 0 else -1


def record(row: dict[str, Any]) -> tuple[float, float]:
    """Sort key of a tip's record, larger is better: its helped rate counting the tip's own source episode
    as its first reading (helped when that episode scored above 0), then recency (created_at).

    Why the source counts: a new tip has no readings, and with the Laplace rate alone every new tip
    started at ½ and won a contradiction against any note from a won episode whose readers had not yet
    beaten their group's mean: in the memory experiment, newer notes of failed episodes (text cosine
    0.90–0.98 with the won ones) retired all 15 won notes of one seed
    (docs/notebook/2026-12-06-memory-structure-experiment.md)."""
    return source_rate(int(row["used"]), int(row["helped"]), float(row["score"])), float(row["created_at"])


def source_rate(used: int, helped: int, score: float) -> float:
    """`rate` with the source episode as one more reading: (helped + won + 1) / (used + 3), won = score > 0.
    A new tip: 2/3 from a won episode, 1/3 from a failed one."""
    return rate(used + 1, helped + (outcome(score) > 0))


def unhelpful(used: int, helped: int) -> bool:
    """Were most of a tip's readers not helped, as `StructureRules.helped_by` counts it (helped < used / 2,
    the Laplace rate below ½)? A tip never read is not. What `score_order` puts behind the rest."""
    return 2 * helped < used


def won(row: dict[str, Any]) -> bool:
    """Did the tip's source episode win (score ≥ `types.WIN_SCORE`)? What `wins_first` puts first."""
    return float(row["score"]) >= WIN_SCORE


def teachers_tip(row: dict[str, Any]) -> bool:
    """Is a tip a teacher's: pinned, or curated (`records.is_curated`: added by hand, edited, or imported
    without a source episode)? The rules never merge into it or retire it by a contradiction."""
    return bool(row["pinned"]) or is_curated(row["origin"], row["edited"], row["source_episode_id"])


def shown_first(row: dict[str, Any], pin_curated: bool) -> bool:
    """Does a tip go before every ranked one: pinned in its group, or (`pin_curated`, the flat memory's
    `MemoryConfig.pin_curated`) any other teacher's tip, so a hand-written tip keyed by its own text does not
    drop out after step 0."""
    return bool(row["pinned"]) or (pin_curated and teachers_tip(row))


def retrieval_order(rows: Sequence[dict[str, Any]], sims: Sequence[float], count_weight: float,
                    max_shown: int, *, threshold: float | None = None, seed: int | None = None,
                    wins_first: bool = False, score_order: bool = False, pin_curated: bool = False) -> list[int]:  # fmt: skip
    """Indices of the live rows to show, best first: pinned, then (`pin_curated`) the other teacher's tips
    (`shown_first`), then (`wins_first`) the rows whose
    source episode won, then rank desc, ties newer first. `score_order`: in place of rank, the tips that
    helped or were never read before the `unhelpful` ones, each part by source score desc, ties by higher
    similarity, then newer (`created_at`, then `seq`: one episode's entries share a time; the flat memory's order).
    `threshold`: rows not shown first need a similarity above it. `seed`: the other rows in a random order
    drawn with it instead of by rank (the random arm). ValueError: `seed` with `wins_first` or `score_order`."""
    if seed is not None and (wins_first or score_order):
        raise ValueError("a random order (seed) keeps no won-first or score order: pass one or the other")
    first = [shown_first(r, pin_curated) for r in rows]
    live = [i for i, r in enumerate(rows) if r["enabled"] and not r["retired"]
            and (first[i] or threshold is None or sims[i] > threshold)]  # fmt: skip

    def order(i: int) -> tuple:
        r = rows[i]
        if score_order:
            within: tuple = (unhelpful(r["used"], r["helped"]), -float(r["score"]), -sims[i])
        else:
            within = (-rank(sims[i], r["used"], r["helped"], count_weight),)
        return (not r["pinned"], not first[i], not (wins_first and won(r)), *within, -r["created_at"], -r.get("seq", 0))

    live.sort(key=order)
    if seed is not None:
        front = [i for i in live if first[i]]
        rest = [i for i in live if not first[i]]
        random.Random(seed).shuffle(rest)
        live = front + rest
    return live[:max_shown]


def placement(text: str, score: float, created_at: float, rows: Sequence[dict[str, Any]],
              text_sims: Sequence[float], rules: StructureRules) -> Placement:  # fmt: skip
    """Where a new tip (text, source score) goes among its group's rows (module docstring). `text_sims[i]`
    is the cosine between the new text's embedding and row i's. Retired rows are never matched."""
    live = [i for i, r in enumerate(rows) if not r["retired"]]
    for i in live:
        if rows[i]["text"] == text:
            return Placement("merge", rows[i]["id"], similarity=1.0)
    mine = outcome(score)
    for i in sorted(live, key=lambda i: -text_sims[i]):
        sim = float(text_sims[i])
        same = outcome(float(rows[i]["score"])) == mine
        if same and sim >= rules.near_duplicate:
            return Placement("merge", rows[i]["id"], similarity=sim)
        if not same and sim >= rules.contradiction:
            new = (source_rate(0, 0, score), created_at)
            winner = "new" if new >= record(rows[i]) else "old"  # a tie goes to the newer tip
            return Placement("contradiction", rows[i]["id"], winner, sim)
    return Placement("add")


def evict(rows: Sequence[dict[str, Any]], max_stored: int) -> list[str]:
    """Ids of the live, unpinned tips to retire so the group keeps `max_stored` live tips: worst record
    first (lowest helped rate, then oldest). Pinned tips are never evicted."""
    live = [r for r in rows if not r["retired"]]
    over = len(live) - max_stored
    if over <= 0:
        return []
    candidates = sorted((r for r in live if not r["pinned"]), key=record)
    return [r["id"] for r in candidates[:over]]


def helped_now(score: float, episodes: int, mean_score: float) -> bool:
    """Did an episode that read the group's tips beat the group's running mean? With no earlier episode
    the mean is taken as 0 (helped = the episode scored above 0)."""
    return score > (mean_score if episodes else 0.0)


def reproduced(score: float, source_score: float) -> bool:
    """Did an episode that read a tip score at least the tip's source episode, and above 0
    (`helped_by = "source"`)? A search note whose readers end below its own score has not held; a won
    plan whose readers win has. Above 0 because every reader scores at least a failed note's −100: a note
    of a failure (or a teacher's tip, score 0) helps only a reader that achieved something."""
    return score >= source_score and outcome(score) > 0


def reader_helped(rules: StructureRules, score: float, source_score: float, episodes: int, mean_score: float) -> bool:
    """Does a reader scoring `score` count as helped by a tip whose source episode scored `source_score`,
    as `rules.helped_by` says: `reproduced` ("source") or `helped_now` against the group's (episodes,
    running mean) ("mean")?"""
    if rules.helped_by == "source":
        return reproduced(score, source_score)
    return helped_now(score, episodes, mean_score)


def updated_mean(episodes: int, mean_score: float, score: float) -> tuple[int, float]:
    """The group's (episodes, running mean) after one more episode scoring `score`."""
    n = episodes + 1
    return n, mean_score + (score - mean_score) / n


def check_place(place: Any, known: Sequence[str], task: str) -> str:
    """`place` if it is one of the environment's places for `task` or `ANYWHERE`, else ValueError naming
    the valid groups."""
    valid = [*known, ANYWHERE]
    if place not in valid:
        raise ValueError(f"unknown group {place!r} for task {task!r}; the environment knows: {', '.join(valid)}")
    return place
