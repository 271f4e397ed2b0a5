"""`ModelSlot`: which weights the one policy holds after each swap, and the save before a swap (torch-free fakes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from empo2_studio.app.model_slot import CheckpointWeights, ModelLoader, ModelSlot, TrainerWeights


class FakePolicy:
    """Records the adapter folders loaded into it."""

    def __init__(self) -> None:
        self.loads: list[str] = []

    def save_adapter(self, path: str) -> None:
        (Path(path) / "adapter_config.json").write_text("{}")

    def load_adapter(self, path: str) -> None:
        self.loads.append(path)


class FakeTrainer:
    def __init__(self, run_id: str, from_fresh: Path | None, log: list[str]) -> None:
        self.run_id, self.from_fresh, self.log = run_id, from_fresh, log
        self.store = f"store-{run_id}"
        self.saves = 0
        self.closed = False
        self.iteration = 1  # trained since its last checkpoint (the tests that need otherwise say so)
        self.saved: tuple[int, Path | None] = (0, None)

    def save_checkpoint(self) -> Path:
        self.saves += 1
        self.log.append(f"save {self.run_id}")
        self.saved = (self.iteration, Path(f"/ck/{self.run_id}/{self.saves}"))
        return self.saved[1]

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def parts():
    policy, embedder, log, built = FakePolicy(), object(), [], []

    embedder_ = embedder

    def new_trainer(session, *, policy, embedder, envs, from_fresh):
        if session == "broken":
            raise ValueError("adapter of another base model")
        assert envs == f"pool-{session}" and embedder is embedder_
        built.append(FakeTrainer(session, from_fresh, log))
        return built[-1]

    loader = ModelLoader(policy, embedder, policy_config=None)
    slot = ModelSlot(loader, session=lambda r: r, envs=lambda r: f"pool-{r}",
                     open_store=lambda session, emb: f"opened-{session}", new_trainer=new_trainer)  # fmt: skip
    return slot, policy, built, log, loader.fresh_adapter()


def test_each_swap_records_the_weights_it_loaded_and_saves_the_live_trainer_first(parts):
    slot, policy, built, log, fresh = parts
    assert slot.loaded is None  # the untrained adapter, as loaded

    a = slot.trainer("a")
    assert (slot.loaded, a.from_fresh, policy.loads) == (TrainerWeights("a"), None, [])  # fresh already in
    assert slot.trainer("a") is a and len(built) == 1  # its own weights: no rebuild, no save
    assert slot.store("a") == "store-a"  # the live trainer's store

    swap = slot.swap(CheckpointWeights("b", "/ck/b/7"))
    assert (swap.saved, swap.trainer, a.saves, a.closed) == (Path("/ck/a/1"), None, 1, True)
    assert (slot.loaded, policy.loads) == (CheckpointWeights("b", "/ck/b/7"), ["/ck/b/7"])
    assert slot.live_trainer("a") is None and slot.store("a") == "store-a"  # its store handle is kept

    b = slot.trainer("b")  # no trainer live: nothing to save; the policy holds b's checkpoint, so fresh first
    assert (b.from_fresh, log) == (fresh, ["save a"])
    assert slot.store("c") == "opened-c"

    swap = slot.swap(None)
    assert (swap.saved, slot.loaded, policy.loads[-1], log) == (Path("/ck/b/1"), None, str(fresh), ["save a", "save b"])

    c = slot.trainer("c")
    assert (c.from_fresh, slot.loaded, slot.store("c")) == (None, TrainerWeights("c"), "store-c")


def test_a_trainer_that_trained_nothing_since_its_checkpoint_is_not_saved_again(parts):
    """An Episodes pair or a Lesson's swap must not add a checkpoint to a session that trained nothing:
    the policy is recorded as holding what the trainer started on (the fresh adapter, or its checkpoint)."""
    slot, policy, built, log, fresh = parts
    a = slot.trainer("a")
    a.iteration = 0  # a new trainer that only played: its weights are the fresh adapter
    swap = slot.swap(CheckpointWeights("b", "/ck/b/7"))
    assert (swap.saved, a.saves, a.closed, slot.loaded) == (None, 0, True, CheckpointWeights("b", "/ck/b/7"))
    b = slot.trainer("b")
    b.saved, b.iteration = (7, Path("/ck/b/7")), 7  # resumed from its checkpoint 7, nothing trained since
    swap = slot.swap(TrainerWeights("c"))
    assert (swap.saved, b.saves, log) == (None, 0, [])
    c = built[-1]
    assert c.from_fresh == fresh  # the policy held b's checkpoint: fresh first, as after a save
    c.iteration = 0
    slot.swap(None)  # c never trained and started fresh: the slot records the fresh adapter
    assert (slot.loaded, policy.loads[-1], log) == (None, str(fresh), [])


def test_a_failed_trainer_build_leaves_the_saved_out_weights_recorded(parts):
    slot, policy, built, log, fresh = parts
    slot.trainer("a")
    with pytest.raises(ValueError, match="another base model"):
        slot.trainer("broken")
    assert slot.loaded == CheckpointWeights("a", "/ck/a/1") and slot.live_trainer("a") is None
    assert slot.trainer("a") is built[1] and built[1].from_fresh == fresh  # rebuilt, from its checkpoint


def test_the_fresh_adapter_folder_goes_with_its_loader():
    """Each studio launch saves the untrained adapter to a temporary folder; it must not outlive the
    loader (644 such folders had piled up in /tmp on the shared machine before this test)."""
    import gc

    loader = ModelLoader(FakePolicy(), object(), policy_config=None)
    fresh = loader.fresh_adapter()
    assert (fresh / "adapter_config.json").read_text() == "{}"
    del loader
    gc.collect()
    assert not fresh.exists()
