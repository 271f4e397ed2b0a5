"""The `empo2-studio` commands that read or edit a session's records without loading a model:
`tips {list,export,import,reembed}` and `sessions`, with the text formatting the commands share."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from typing import Any

from empo2_studio.cli_checks import (
    OK, UsageError, check_out_file, check_task_filter, check_tip_file, open_session, session_root,
)
from empo2_studio.cli_commands import SessionsCmd, TipsCmd, TipsExport, TipsImport, TipsList
from empo2_studio.sessions import list_sessions

SHOWN_METRICS = ("rollout/score_mean", "rollout/success_rate", "loss/policy", "mask/low_prob_frac")
"""The metrics `train`'s progress bar and `sessions`' table show."""
LISTED = ("kind", *SHOWN_METRICS[:3], "eval/score_mean", "eval/success_rate", "adapt/score_mean", "adapt/success_rate")
"""A run's last metrics row in `sessions`: whichever of these it holds (an evaluation's or adaptation's row
has no rollout keys)."""


def run_tips(cmd: TipsCmd) -> int:
    """`empo2-studio tips list|export|import|reembed --session RUN_ID`."""
    a = cmd.action
    if isinstance(a, TipsList):  # bad filters are usage errors, before a session or an embedder opens
        for flag, value, least in (("--limit", a.limit, 1), ("--variation", a.variation, 0)):
            if value is not None and (isinstance(value, bool) or value < least):
                raise UsageError(f"{flag} must be ≥ {least}, got {value}")
    if isinstance(a, TipsExport):
        check_out_file(a.out)
    session = open_session(a.session, a.sessions_dir)
    if isinstance(a, (TipsList, TipsExport)):
        check_task_filter(a.task, session.config.env)
    structured = session.config.memory.structure != "flat"
    where = session.tips_path.with_name(f"{session.tips_path.stem}-structured{session.tips_path.suffix}") if structured else session.tips_path
    if isinstance(a, (TipsList, TipsExport)) and not where.exists():  # where open_tip_store keeps them
        print(f"session {session.run_id!r} has no tips yet")
        return OK
    if isinstance(a, TipsImport):  # a missing or malformed file is bad input: exit 2 before the embedder loads
        check_tip_file(a.file, session.config.env, structured=structured)
    from empo2_studio.memory import make_embedder, open_tip_store

    embedder = make_embedder(session.config.memory.embedder)
    store = open_tip_store(session.tips_path, embedder, session.config.memory, env=session.config.env, verify_embedder=False)
    if isinstance(a, TipsList):
        tips = store.list_tips(task=a.task, variation=a.variation, text_contains=a.contains, limit=a.limit)
        for t in tips:
            flag = "" if t.enabled else " [off]"
            print(f"{t.tip_id[:8]}  {t.task}#{t.variation}  {t.score:6.1f}{flag}  {clip(t.text, 90)}")
        print(f"{len(tips)} of {store.count()} tip(s)", file=sys.stderr)
    elif isinstance(a, TipsExport):
        n = store.export_jsonl(a.out, **({"task": a.task} if a.task else {}), **({"flat": True} if a.flat and structured else {}))
        print(f"wrote {n} tip(s) to {a.out}")
    elif isinstance(a, TipsImport):
        result = store.import_jsonl(a.file)  # check_tip_file above refused bad lines and partitions
        print(f"imported {result.added} tip(s), skipped {result.skipped_duplicates} duplicate(s)")
    else:
        print(f"re-embedded {store.reembed(embedder)} tip(s) with {embedder.name!r}")
    return OK


def run_sessions(cmd: SessionsCmd) -> int:
    """`empo2-studio sessions`: one line per run (or one JSON object with --json)."""
    rows = list_sessions(session_root(cmd.sessions_dir))
    if cmd.json:
        for r in rows:
            print(json.dumps({**asdict(r), "dir": str(r.dir)}))
        return OK
    if not rows:
        print(f"no sessions in the folder {str(session_root(cmd.sessions_dir))!r}")
        return OK
    print(f"{'run id':<44} {'env/task':<32} {'iter':>5} {'ckpts':>5}  last metrics")
    for r in rows:
        m = r.last_metrics
        shown = "  ".join(f"{k.removeprefix('rollout/').removeprefix('loss/')}={fmt(m[k])}" for k in LISTED if k in m)
        print(f"{r.run_id:<44} {clip(f'{r.env}/{r.task}', 32):<32} {r.iteration:>5} {r.checkpoints:>5}  {shown}")
    return OK


def fmt(v: Any) -> str:
    """A metric value for the terminal (4 significant digits for floats)."""
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def clip(text: str, n: int) -> str:
    """`text` on one line, cut to `n` characters with an ellipsis."""
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"
