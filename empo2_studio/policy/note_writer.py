"""Who writes the tips: the acting policy (paper §2) or a frozen note-writer adapter (`MemoryConfig.note_writer`).

For the embedded model, "auto" loads the shipped writer, `assets/warmstart/<model>-note-writer`: a LoRA on
the same base model trained by `scripts/make_warmstart.py --reflect-only --context observation` to note,
about one observation at a time, where the things the task names are or are not
(`memory.reflection.write_observation_notes`). On the trap's test layouts its notes state what the
episode found in 0.97–1.00 of won and failed episodes, against 0.42–0.58 for the best writer of whole
episodes (docs/notebook/2026-12-04-observation-notes.md). For any other model "auto" is the policy itself.
A loaded writer is a `FrozenWriter`: it never trains and decodes greedily, so it writes about one
observation once per process and answers the same observation again from memory.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from empo2_studio.config import EMBEDDED_MODEL, PolicyConfig, RunConfig
from empo2_studio.policy.loading import WARM_START_DIR, load_policy

NOTE_WRITER = f"{EMBEDDED_MODEL}-note-writer"
"""The folder under WARM_START_DIR that `note_writer` "auto" loads for the embedded model."""
NOTE_WRITER_COMMAND = (
    ".venv/bin/python scripts/make_warmstart.py --reflect-only --context observation --splits dev train "
    f"--per-layout 8 --epochs 2 --batch 8 --lr 1e-3 --verdict-weight 3 --out assets/warmstart/{NOTE_WRITER}"
)


def note_writer_dir(policy: PolicyConfig, note_writer: str | None) -> Path | None:
    """The adapter directory that writes the tips, or None when the acting policy writes them.

    Args:
        policy: the acting policy's config (its `model` decides what "auto" means).
        note_writer: `MemoryConfig.note_writer`: "auto" (the shipped writer for the embedded model,
            None for any other), None or "none" (the policy), or a PEFT adapter directory.

    Raises FileNotFoundError naming the missing file (and, for "auto", the command that builds it).
    """
    if note_writer in (None, "none") or (note_writer == "auto" and policy.model != EMBEDDED_MODEL):
        return None
    folder = WARM_START_DIR / NOTE_WRITER if note_writer == "auto" else Path(note_writer).expanduser()
    hint = f"build it with `{NOTE_WRITER_COMMAND}`" if note_writer == "auto" else "give a PEFT adapter directory"
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        if not (folder / name).is_file():
            raise FileNotFoundError(f"memory.note_writer: {folder / name} is missing; {hint}, or --memory.note-writer none")
    return folder


def note_context(configured: str, folder: Path | None) -> str:
    """`MemoryConfig.note_context` resolved: "auto" is "observation" for a writer trained on single
    observations (its warmstart.json says `"context": "observation"`), else "episode" (paper §2)."""
    if configured != "auto":
        return configured
    trained = _meta(folder).get("context") if folder is not None else None
    return "observation" if trained == "observation" else "episode"


def _meta(folder: Path) -> dict[str, Any]:
    """The adapter's warmstart.json (what `make_warmstart.py` trained it on), {} when it has none."""
    path = folder / "warmstart.json"
    return json.loads(path.read_text()) if path.is_file() else {}


class FrozenWriter:
    """A note writer whose weights never change, with its notes on single observations remembered.

    It decodes greedily, so one observation prompt always gets the same note: a prompt written about
    before is answered from memory instead of by the model (a race plays each training layout every few
    iterations and sees the same rooms again; a lesson replays its variations). Whole-episode notes
    (conversations with turns, or kept caches `keys`) go to the model every time. Every other attribute,
    read or set, is the wrapped policy's. At most `MAX_NOTES` notes are kept, the least recently used
    dropped first. (Greedy decoding in batches of other sizes can break a near-tie another way: a
    remembered note is the one written in the batch that first saw its prompt.)
    """

    MAX_NOTES = 20_000
    _OWN = frozenset({"policy", "_notes", "_lock", "written", "remembered", "MAX_NOTES"})

    def __init__(self, policy: Any):
        self.policy = policy
        self._notes: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()
        self.written = self.remembered = 0  # observation notes the model wrote, and answered from memory

    def __getattr__(self, name: str) -> Any:  # only for names not set above: the policy's
        if name in FrozenWriter._OWN:  # not yet set (a copy being built): never ask the policy
            raise AttributeError(name)
        return getattr(self.policy, name)

    def __setattr__(self, name: str, value: Any) -> None:
        # a setting such as `decoding` is the model's: set on the wrapper it would not reach the model
        object.__setattr__(self, name, value) if name in FrozenWriter._OWN else setattr(self.policy, name, value)

    def write_tips(self, conversations: Sequence[Any], instruction: str | Sequence[str], *,
                   keys: Sequence[str] | None = None) -> list[str]:  # fmt: skip
        """`policy.write_tips`, answering an observation prompt (an empty conversation, one instruction
        each) the model wrote about before from memory; one batch for the rest, in order.
        Raises ValueError if the model returns another number of notes than it was asked for."""
        if keys is not None or isinstance(instruction, str) or any(len(c) for c in conversations):
            return self.policy.write_tips(conversations, instruction, keys=keys)
        prompts = list(instruction)
        with self._lock:
            known = {p: self._notes[p] for p in prompts if p in self._notes}
        todo = list(dict.fromkeys(p for p in prompts if p not in known))
        if todo:  # the model runs outside the lock: another job's notes need not wait for it
            replies = self.policy.write_tips([()] * len(todo), todo)
            if len(replies) != len(todo):
                raise ValueError(f"the note writer returned {len(replies)} notes for {len(todo)} observations")
            known.update(zip(todo, replies))
        with self._lock:
            self.written += len(todo)
            self.remembered += len(prompts) - len(todo)
            for p, note in known.items():
                self._notes[p] = note
                self._notes.move_to_end(p)
            while len(self._notes) > self.MAX_NOTES:
                self._notes.popitem(last=False)
        return [known[p] for p in prompts]


_LOADED: dict[PolicyConfig, Any] = {}
"""Writers loaded so far, by config: a writer is never trained, so every run of a process shares it."""
_LOCK = threading.Lock()


def load_note_writer(cfg: RunConfig, policy: Any, writer: Any | None = None) -> tuple[Any, str]:
    """(the tip writer, its note context) for a run of `cfg` whose acting policy is `policy`: `writer`
    when given (a ready one, shared by the caller), else the `note_writer_dir` adapter on the same base
    model (`policy.base_model_name`), loaded once per process and never trained, else `policy`.
    "auto" is the policy too on an environment the shipped writer was not trained on (warmstart.json
    `envs`: the trap only; ScienceWorld's tips are the policy's, as in the paper).
    Raises FileNotFoundError as `note_writer_dir`."""
    # "auto" follows the policy actually given (a test's tiny or scripted policy gets no embedded writer)
    # and the environment: the shipped writer is used only on the environments it was trained on.
    folder = note_writer_dir(replace(cfg.policy, model=getattr(policy, "base_model_name", "")), cfg.memory.note_writer)
    if folder is not None and cfg.memory.note_writer == "auto" and cfg.env.name not in _meta(folder).get("envs", ()):
        folder = None
    if writer is None and folder is None:
        writer = policy
    elif writer is None:
        key = replace(cfg.policy, warm_start=str(folder), adapter=None)
        with _LOCK:
            if key not in _LOADED:
                _LOADED[key] = FrozenWriter(load_policy(key))
            writer = _LOADED[key]
    return writer, note_context(cfg.memory.note_context, folder)
