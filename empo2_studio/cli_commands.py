"""The `empo2-studio` commands as dataclasses: tyro turns each into its flags and `--help` text
(a field's docstring is its help line). `cli.py` parses with them and runs the command."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import tyro

from empo2_studio.config import RunConfig
from empo2_studio.types import EnvName


@dataclass
class AppCmd:
    """Launch the studio (Gradio) in the browser."""

    host: str = "127.0.0.1"
    """Interface to listen on (0.0.0.0 to expose on the network)."""
    port: int = 7860
    """TCP port."""
    sessions_dir: Path | None = None
    """Sessions root (default: $EMPO2_SESSIONS_DIR or ./sessions)."""
    env: EnvName | None = None
    """Env of the default session when the studio creates it (default: the studio's choice)."""
    run_id: str | None = None
    """Session to open (or create) at start (default: the studio's default session)."""
    share: bool = False
    """Also serve a public Gradio share link (off: the studio stays on this machine)."""


@dataclass
class TrainCmd:
    """Train a new run from flags and/or --config, or continue one with --resume."""

    run: Annotated[RunConfig, tyro.conf.arg(name="")] = field(default_factory=RunConfig)
    config: Path | None = None
    """A RunConfig JSON file (e.g. a session's config.json); flags given with it override it."""
    resume: str | None = None
    """Continue this run id from its latest checkpoint (its stored config is used unchanged)."""
    more: int | None = None
    """With --resume: run this many more iterations (default: up to train.iterations in total)."""
    sessions_dir: Path | None = None
    """Sessions root (default: $EMPO2_SESSIONS_DIR or ./sessions)."""


@dataclass
class EvalCmd:
    """Evaluate a run's latest checkpoint on the test split, without memory (paper §5)."""

    session: str
    """Run id."""
    variations: int | None = None
    """Test variations (default: the run's train.eval_variations)."""
    repeats: int | None = None
    """Episodes per variation (default: the run's train.eval_repeats)."""
    json: bool = False
    """Print the metrics as one JSON object."""
    sessions_dir: Path | None = None
    """Sessions root (default: $EMPO2_SESSIONS_DIR or ./sessions)."""


@dataclass
class AdaptCmd:
    """Out-of-distribution adaptation (paper §6.1): frozen weights, memory grows over K trials."""

    from_: Annotated[str, tyro.conf.arg(name="from")]
    """Run id whose latest checkpoint is adapted."""
    task: str
    """A task the run was not trained on."""
    trials: int = 10
    """Trials after the memory-free trial 0."""
    json: bool = False
    """Print the per-trial rows as JSON lines."""
    sessions_dir: Path | None = None
    """Sessions root (default: $EMPO2_SESSIONS_DIR or ./sessions)."""


@dataclass
class DistillCmd:
    """Off-policy distillation over recorded memory-mode episodes, without new rollouts."""

    session: str
    """Run id."""
    episodes: str | None = None
    """Comma-separated episode ids."""
    all_memory: bool = False
    """Use every memory-mode training episode of the session."""
    sessions_dir: Path | None = None
    """Sessions root (default: $EMPO2_SESSIONS_DIR or ./sessions)."""


@dataclass
class TipsList:
    """Print a session's tips."""

    session: str
    """Run id."""
    task: str | None = None
    """Only this task."""
    variation: int | None = None
    """Only this variation (memory partition)."""
    contains: str | None = None
    """Case-insensitive text filter."""
    limit: int = 50
    """At most this many rows."""
    sessions_dir: Path | None = None
    """Sessions root (default: $EMPO2_SESSIONS_DIR or ./sessions)."""


@dataclass
class TipsExport:
    """Write a session's tips to a JSONL file."""

    session: str
    """Run id."""
    out: Path
    """Output file (overwritten)."""
    task: str | None = None
    """Only this task."""
    flat: bool = False
    """From a structured memory: write the flat format (no groups or counts), which a flat session imports."""
    sessions_dir: Path | None = None
    """Sessions root (default: $EMPO2_SESSIONS_DIR or ./sessions)."""


@dataclass
class TipsImport:
    """Add the tips of a JSONL file to a session (all lines validated first; nothing added on error)."""

    session: str
    """Run id."""
    file: Path
    """A JSONL file written by `tips export`, or by hand: one JSON object per line with task, variation,
    text and score (required; id, action, origin, enabled … optional)."""
    sessions_dir: Path | None = None
    """Sessions root (default: $EMPO2_SESSIONS_DIR or ./sessions)."""


@dataclass
class TipsReembed:
    """Re-embed every tip with the session's configured embedder."""

    session: str
    """Run id."""
    sessions_dir: Path | None = None
    """Sessions root (default: $EMPO2_SESSIONS_DIR or ./sessions)."""


@dataclass
class TipsCmd:
    """Curate a session's tip memory."""

    action: Annotated[
        Annotated[TipsList, tyro.conf.subcommand("list")]
        | Annotated[TipsExport, tyro.conf.subcommand("export")]
        | Annotated[TipsImport, tyro.conf.subcommand("import")]
        | Annotated[TipsReembed, tyro.conf.subcommand("reembed")],
        tyro.conf.arg(name=""),
    ]


@dataclass
class SessionsCmd:
    """List runs with their last metrics."""

    json: bool = False
    """One JSON object per run."""
    sessions_dir: Path | None = None
    """Sessions root (default: $EMPO2_SESSIONS_DIR or ./sessions)."""


COMMANDS: dict[str, type] = {
    "app": AppCmd, "train": TrainCmd, "eval": EvalCmd, "adapt": AdaptCmd, "distill": DistillCmd,
    "tips": TipsCmd, "sessions": SessionsCmd,
}  # fmt: skip
