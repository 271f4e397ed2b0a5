"""The checks `empo2-studio` makes before any model loads or any session is written.

A bad task, variation, adapter, tip file, unknown run or a config change on resume is bad input: each
check raises `UsageError` (exit code 2) with a message naming the bad value and the valid ones, and
leaves nothing on disk. `cli.py` runs the commands; `cli_commands.py` declares their flags.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Any

from empo2_studio.config import DEFAULT_WARM_START, WARM_START_DIR, EnvConfig, RunConfig
from empo2_studio.sessions import Session, absolute_paths, default_sessions_root

OK, FAILURE, USAGE, ABORTED = 0, 1, 2, 130
"""Exit codes: ok, failure, usage (bad flag, invalid config, unknown run), aborted by a second Ctrl-C."""


class UsageError(Exception):
    """Bad input detected before any work started (exit code 2)."""


def session_root(sessions_dir: Path | None) -> Path:
    """`--sessions-dir`, else $EMPO2_SESSIONS_DIR, else ./sessions; UsageError when that is a file."""
    root = Path(sessions_dir) if sessions_dir is not None else default_sessions_root()
    if root.exists() and not root.is_dir():
        raise UsageError(f"the sessions folder {str(root)!r} is a file; give a folder with --sessions-dir")
    return root


def open_session(run_id: str, sessions_dir: Path | str | None) -> Session:
    """The session `run_id`; UsageError naming the sessions that exist when there is none."""
    try:
        return Session.open(session_root(None if sessions_dir is None else Path(sessions_dir)), run_id)
    except (FileNotFoundError, ValueError) as e:
        raise UsageError(str(e)) from None


def message(e: BaseException) -> str:
    """An exception's text for the terminal (a KeyError's message without its quotes)."""
    return e.args[0] if isinstance(e, KeyError) and e.args else str(e)


_SECTIONS = {s: {f.name for f in fields(part)} for s, part in vars(RunConfig()).items() if hasattr(part, "__dataclass_fields__")}  # fmt: skip
# not inside a path, a quoted value or a flag: nothing glued before, no ".json" or "/x" after
_FIELD = re.compile(r"(?<![\w./'\"-])(" + "|".join(_SECTIONS) + r")\.([a-z_]+)\b(?!\.?[\w/])")


def flag_names(text: str) -> str:
    """`text` with every config field it names (`env.step_limit`) written as the flag that sets it
    (`--env.step-limit`), so a terminal user reads what to type; other dotted words are left alone."""

    def flag(m: re.Match) -> str:
        section, name = m.groups()
        return f"--{section}.{name.replace('_', '-')}" if name in _SECTIONS[section] else m.group(0)

    return _FIELD.sub(flag, text)


def check_env(cfg: RunConfig) -> None:
    """Reject an invalid config, an unknown task, or training variations outside the task's train split
    (no JVM starts)."""
    from empo2_studio.envs import make_env

    try:
        cfg.validate()  # the config's own message (with the valid range) before the environment's
        env = make_env(cfg.env)
    except ValueError as e:
        default = EnvConfig()
        hint = (f" ({default.task!r} is a trap task, and --env.task's default when the flag is not given)"
                if cfg.env.name != default.name and cfg.env.task == default.task else "")  # fmt: skip
        raise UsageError(f"{e}{hint}") from None
    try:
        train = env.variations(cfg.env.task, "train")
    finally:
        env.close()
    outside = [v for v in cfg.env.variations if v not in train]
    if outside:
        raise UsageError(
            f"env.variations {outside} of {cfg.env.task!r} are outside its train split "
            f"{train[0]}–{train[-1]}"
        )


def check_adapter(cfg: RunConfig) -> None:
    """Reject `--policy.adapter DIR`, or without it a `--policy.warm-start DIR`, that the base model cannot
    load (missing adapter files, not a PEFT directory, another base, another LoRA rank / targets, or tensor
    shapes of another model), reading only the adapter's config, its safetensors header and the base
    model's config: no weights load, nothing is created."""
    from empo2_studio.policy.loading import warm_start_dir

    folder = cfg.policy.adapter
    if not folder:
        try:
            warm = warm_start_dir(cfg.policy)
        except FileNotFoundError as e:
            raise UsageError(str(e)) from None
        if warm is None or warm == WARM_START_DIR / DEFAULT_WARM_START:
            return  # none, or the shipped default (its tests check that it fits)
        folder = str(warm)
    from empo2_studio.policy.loading import check_adapter  # torch loads only here

    try:
        check_adapter(folder, cfg.policy)
    except ValueError as e:
        raise UsageError(str(e) if cfg.policy.adapter else f"policy.warm_start: {e}") from None


def check_unseen_task(cfg: RunConfig, task: str) -> None:
    """Adaptation needs a task of the run's env other than the one it trained on (no JVM starts)."""
    from empo2_studio.envs import check_unseen_task, make_env

    env = make_env(cfg.env)
    try:
        check_unseen_task(task, env.task_names(), cfg.env)
    except ValueError as e:
        raise UsageError(str(e)) from None
    finally:
        env.close()


def check_task_filter(task: str | None, env: EnvConfig) -> None:
    """Raise UsageError unless `task` is None or a task of `env` (`tips list/export --task`): a misspelt
    filter would otherwise list or write nothing and exit 0. The catalogue only, no JVM."""
    if task is None:
        return
    from empo2_studio.envs import make_env

    made = make_env(env)
    names = made.task_names()
    made.close()  # the catalogue only: no JVM was started
    if task not in names:
        raise UsageError(f"--task {task!r} is not a {env.name} task; valid tasks: {', '.join(names)}")


def check_out_file(path: Path) -> None:
    """Raise UsageError unless `path` can be written as a new or replaced file: its folder exists and it
    is not itself a folder (`tips export --out`), before anything is read."""
    if path.is_dir():
        raise UsageError(f"--out {str(path)!r} is a folder; give a file path such as {str(path / 'tips.jsonl')!r}")
    if not path.parent.is_dir():
        raise UsageError(f"--out {str(path)!r}: its folder {str(path.parent)!r} does not exist")


def discard_new_session(session: Session) -> None:
    """Remove a session this command just created, if nothing but its config was written to it."""
    if session.latest_checkpoint() is None and not session.metrics() and not session.episodes():
        shutil.rmtree(session.dir, ignore_errors=True)


def check_tip_file(path: Path, env: EnvConfig, *, structured: bool = False) -> None:
    """Raise UsageError if `path` is not a readable tip JSONL file whose every line is valid (in the
    format of a flat store, or, `structured`, a structured one, which also reads flat lines) and names
    a task and variation of `env` (`envs.partition_error`; the catalogue only, no JVM)."""
    from empo2_studio.envs import partition_check
    from empo2_studio.memory import grouped_records, records

    if not path.is_file():
        raise UsageError(f"no such file: {path}")
    try:
        with open(path, encoding="utf-8") as fh:  # lines end at newlines only: a tip may hold U+2028
            lines = list(fh)
        if not any(line.strip() for line in lines):
            raise ValueError("it holds no tips (no non-blank lines); nothing imported")
        parsed = (grouped_records if structured else records).parse_jsonl(lines)
        with partition_check(env) as check:
            records.refuse_partitions(lines, parsed, check)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise UsageError(f"cannot import {path}: {e}") from None


def refuse_config_change(session: Session, cfg: RunConfig) -> None:
    """Resuming keeps the stored config: a different base model gets `check_compatible`'s message,
    any other change is refused too (earlier iterations must stay described by config.json)."""
    # Folders compared as Session.create stores them ("auto" or a relative path names the stored folder).
    cfg, stored = replace(absolute_paths(cfg), run_id=session.config.run_id), absolute_paths(session.config)
    if cfg == stored:
        return
    try:
        session.check_compatible(cfg)
    except ValueError as e:
        raise UsageError(str(e)) from None
    changed = sorted(_diff(asdict(stored), asdict(cfg)))
    raise UsageError(
        f"--resume continues {session.run_id!r} with its stored config; these flags would change it: "
        f"{', '.join(changed)}. Start a new run instead: empo2-studio train --config "
        f"{session.dir / 'config.json'} --run-id NEW_ID [flags]"
    )


def _diff(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for k in a:
        if isinstance(a[k], dict):
            out += _diff(a[k], b[k], f"{prefix}{k}.")
        elif a[k] != b[k]:
            out.append(f"{prefix}{k}")
    return out
