"""Two processes writing the same tip store at once: no lost write, no duplicate, readers see new rows."""

from __future__ import annotations

import multiprocessing as mp

from empo2_studio.config import MemoryConfig
from empo2_studio.memory import HashEmbedder, TipStore

N = 6


def _writer(path: str, name: str, start, done) -> None:
    store = TipStore.open(path, HashEmbedder(), MemoryConfig())
    start.wait(60)
    for i in range(N):
        store.add_tip("t", 0, f"{name} tip {i}", score=i)
        try:  # both writers also try the same shared texts: exactly one of each may land
            store.add_tip("t", 0, f"shared tip {i}", score=0)
        except ValueError:
            pass
    done.put(name)


def test_two_processes_write_concurrently(tmp_path):
    path = str(tmp_path / "tips.lance")
    reader = TipStore.open(path, HashEmbedder(), MemoryConfig())  # opened before any write
    ctx = mp.get_context("spawn")  # LanceDB runs threads; never fork it
    start, done = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(path, name, start, done)) for name in ("studio", "cli")]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(180)
    assert [p.exitcode for p in procs] == [0, 0]
    texts = [t.text for t in reader.list_tips()]
    assert len(texts) == len(set(texts)) == 3 * N  # N each + N shared, no loss, no duplicate
    assert set(texts) == {f"{n} tip {i}" for n in ("studio", "cli", "shared") for i in range(N)}
    assert reader.count("t", 0) == 3 * N
    seqs = [r["seq"] for r in reader._rows(None, ["seq"])]
    assert sorted(seqs) == list(range(3 * N))  # insertion numbers are unique and gap-free
