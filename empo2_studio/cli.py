"""`empo2-studio`: the headless front door (the studio is the other one).

    empo2-studio                       launch the studio (same as `empo2-studio app`)
    empo2-studio train [--config F.json] [--algo.clip-low 0.2 ...]   a new run
    empo2-studio train --resume RUN_ID [--more N]                    continue from the last checkpoint
    empo2-studio eval --session RUN_ID         test split, no memory, eval temperature
    empo2-studio adapt --from RUN_ID --task T --trials K             OOD adaptation, frozen weights
    empo2-studio distill --session RUN_ID (--episodes a,b | --all-memory)
    empo2-studio tips {list,export,import,reembed} --session RUN_ID ...
    empo2-studio sessions                      list runs with their last metrics

Every RunConfig field is a flag (`--rollout.p-memory`, `--algo.low-prob-mask per-sequence`, ...);
flags override `--config`. Exit codes: 0 ok, 1 failure, 2 usage (bad flag, invalid config, unknown
run), 130 aborted by a second Ctrl-C. The first Ctrl-C stops training after the current iteration
and saves a checkpoint. Sessions live in `--sessions-dir`, else $EMPO2_SESSIONS_DIR, else ./sessions.
Heavy modules (torch, the trainer, gradio) load only inside the command that needs them.

The commands' flags are declared in cli_commands.py, the checks made before any model loads in
cli_checks.py, and the model-free `tips` and `sessions` commands live in cli_records.py.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import traceback
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import tyro

from empo2_studio import __version__
from empo2_studio.cli_checks import (  # the names scale.launch reads off this module too
    ABORTED, FAILURE, OK, USAGE, UsageError, check_adapter, check_env, check_unseen_task, discard_new_session,
    flag_names, message, open_session, refuse_config_change, session_root,
)  # fmt: skip
from empo2_studio.cli_commands import COMMANDS, AdaptCmd, AppCmd, DistillCmd, EvalCmd, TrainCmd
from empo2_studio.cli_records import SHOWN_METRICS, fmt, run_sessions, run_tips
from empo2_studio.config import MAX_EVAL_REPEATS, RunConfig
from empo2_studio.sessions import Session


# ---- entry point -----------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code (0 ok, 1 failure, 2 usage, 130 aborted)."""
    try:
        code = _main(argv)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # `empo2-studio … | head` closed the pipe early: not a failure, and Python must not complain
        # again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return OK


def _main(argv: Sequence[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help"):
        print(_overview())
        return OK
    if args and args[0] == "--version":
        print(f"empo2-studio {__version__}")
        return OK
    name = args.pop(0) if args and args[0] in COMMANDS else "app"
    if args and not args[0].startswith("-") and name == "app" and args[0] not in COMMANDS:
        print(f"empo2-studio: unknown command {args[0]!r}; commands: {', '.join(COMMANDS)}", file=sys.stderr)
        return USAGE
    try:
        cmd = _parse(name, args)
        return RUNNERS[name](cmd)
    except SystemExit as e:  # tyro/argparse: --help (0) or a bad flag (2)
        return e.code if isinstance(e.code, int) else USAGE
    except UsageError as e:
        print(f"empo2-studio {name}: {flag_names(str(e)) if name == 'train' else e}", file=sys.stderr)
        return USAGE
    except KeyboardInterrupt:
        print("\naborted", file=sys.stderr)
        return ABORTED
    except BrokenPipeError:
        raise
    except (ValueError, KeyError, OSError) as e:
        text = message(e)  # only train takes config flags: other commands' messages keep the field names
        print(f"empo2-studio {name}: error: {flag_names(text) if name == 'train' else text}", file=sys.stderr)
        return FAILURE
    except Exception:
        traceback.print_exc()
        return FAILURE


def _overview() -> str:
    lines = [f"usage: empo2-studio [COMMAND] [--help] ...   (version {__version__})", "", "commands:"]
    for name, cls in COMMANDS.items():
        summary = (cls.__doc__ or "").strip().splitlines()[0]
        lines.append(f"  {name:<9} {summary}" + ("  [default]" if name == "app" else ""))
    lines += ["", "Run `empo2-studio COMMAND --help` for a command's flags."]
    return "\n".join(lines)


def _parse(name: str, args: list[str]) -> Any:
    prog = f"empo2-studio {name}"
    if name != "train":
        return tyro.cli(COMMANDS[name], args=args, prog=prog)
    default = TrainCmd()
    config_path = _peek_flag(args, "--config")
    resume = _peek_flag(args, "--resume")
    for flag, value in (("--config", config_path), ("--resume", resume)):
        if value is not None and not value.strip():  # not ignored: a new default run would start
            raise UsageError(f"{flag} needs a {'file' if flag == '--config' else 'run id'}, got {value!r}")
    if config_path and resume:
        raise UsageError("give either --config (a new run) or --resume (an existing run), not both")
    if config_path:
        try:
            data = json.loads(Path(config_path).read_text())
            if not isinstance(data, dict):
                raise ValueError("it must be a JSON object of config sections, like a session's config.json "
                                 f"(got {type(data).__name__})")  # fmt: skip
            default = TrainCmd(run=RunConfig.from_dict(data))
        except (OSError, ValueError, TypeError) as e:
            raise UsageError(f"cannot read config {config_path}: {_config_error(e)}") from None
    if resume:
        session = open_session(resume, _peek_flag(args, "--sessions-dir"))
        default = TrainCmd(run=session.config)
    return tyro.cli(TrainCmd, args=args, prog=prog, default=default)


def _config_error(e: BaseException) -> str:
    """Why a config file was refused, in words (JSON's own "Expecting value: line 1 column 1" alone
    does not say the file is not JSON)."""
    return f"not a JSON object ({e})" if isinstance(e, json.JSONDecodeError) else message(e)


def _peek_flag(args: list[str], flag: str) -> str | None:
    """The value of `flag` in args (`--flag V` or `--flag=V`), before the full parse."""
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


# ---- runners ---------------------------------------------------------------------------------------


def run_app(cmd: AppCmd) -> int:
    try:
        from empo2_studio.app import launch  # gradio loads only here
    except ImportError as e:
        print(f"empo2-studio app: the studio cannot start: {e}", file=sys.stderr)
        return FAILURE
    extra: dict[str, Any] = {} if cmd.run_id is None else {"run_id": cmd.run_id}
    root = session_root(cmd.sessions_dir)
    launch(host=cmd.host, port=cmd.port, sessions_dir=root, env=cmd.env, share=cmd.share, **extra)
    return OK


def run_train(cmd: TrainCmd) -> int:
    from empo2_studio.scale import check_launch, needs_scale_path  # stdlib only

    if needs_scale_path(cmd.run):  # several processes (torchrun / accelerate launch), vLLM or Ray
        from empo2_studio.scale.launch import run_train_distributed

        return run_train_distributed(cmd, sys.modules[__name__])
    try:
        check_launch(cmd.run, 1, resuming=bool(cmd.resume))  # a multi-process run needs its launcher
    except ValueError as e:
        raise UsageError(str(e)) from None
    if cmd.more is not None and cmd.more < 1:
        raise UsageError(f"--more is how many more iterations to train and must be ≥ 1, got {cmd.more}")
    if cmd.resume:
        session = open_session(cmd.resume, cmd.sessions_dir)
        refuse_config_change(session, cmd.run)
        trainer = _load_trainer(session, require_checkpoint=True)
        total = session.config.train.iterations
        todo = cmd.more if cmd.more is not None else total - trainer.iteration
        if todo < 1:
            print(f"{session.run_id}: already at iteration {trainer.iteration} of {total}; use --more N")
            return OK
    else:
        if cmd.more is not None:
            raise UsageError("--more only applies with --resume; use --train.iterations for a new run")
        check_env(cmd.run)  # a bad task or variation is a usage error, before a session or model exists
        check_adapter(cmd.run)  # so is an adapter that does not fit the base model
        try:
            session = Session.create(session_root(cmd.sessions_dir), cmd.run)
        except (ValueError, FileExistsError) as e:
            raise UsageError(str(e)) from None
        try:
            trainer = _load_trainer(session, require_checkpoint=False)
        except (ValueError, FileNotFoundError) as e:  # a model not found offline, or something it lacks
            discard_new_session(session)  # (e.g. LoRA target modules): nothing trained, nothing kept
            raise UsageError(message(e)) from None
        print(f"session {session.run_id} in {session.dir}", file=sys.stderr)
        todo = session.config.train.iterations
    return _train_loop(trainer, todo)


def _train_loop(trainer: Any, iterations: int) -> int:
    from tqdm import tqdm

    with _StopOnInterrupt() as stop, tqdm(total=iterations, desc="train", unit="it") as bar:

        def on_report(report: Any) -> None:
            shown = {k.split("/")[-1]: f"{report.metrics[k]:.3g}" for k in SHOWN_METRICS if k in report.metrics}
            bar.set_postfix({"mode": report.update_mode, **shown}, refresh=False)
            bar.update(1)

        try:
            reports = trainer.train(iterations, stop=stop, on_report=on_report)
        finally:
            trainer.close()
    session = trainer.session
    latest = session.latest_checkpoint()
    where = f"; checkpoint {latest[1]}" if latest else ""
    note = " (stopped by Ctrl-C)" if stop.is_set() else ""
    print(f"{session.run_id}: {len(reports)} iteration(s), now at {trainer.iteration}{note}{where}")
    return OK


def run_eval(cmd: EvalCmd) -> int:
    # --repeats is capped: the evaluation holds one env per repeat, a ScienceWorld JVM each
    for flag, value, most in (("--variations", cmd.variations, None), ("--repeats", cmd.repeats, MAX_EVAL_REPEATS)):
        if value is not None and value < 1:
            raise UsageError(f"{flag} must be ≥ 1, got {value}")
        if value is not None and most is not None and value > most:
            raise UsageError(f"{flag} must be ≤ {most}, got {value}")
    from empo2_studio import evaluation
    from empo2_studio.envs import EnvPool

    session = open_session(cmd.session, cmd.sessions_dir)
    policy, iteration = _load_frozen_policy(session)
    envs = EnvPool(session.config.env)
    try:
        result = evaluation.evaluate(
            policy, envs, session.config, session, iteration=iteration, variations=cmd.variations, repeats=cmd.repeats
        )
    finally:
        envs.close()
    _print_metrics(result, as_json=cmd.json)
    return OK


def run_adapt(cmd: AdaptCmd) -> int:
    from tqdm import tqdm

    if cmd.trials < 1:
        raise UsageError(f"--trials must be ≥ 1, got {cmd.trials}")
    session = open_session(cmd.from_, cmd.sessions_dir)
    check_unseen_task(session.config, cmd.task)  # before the model loads
    from empo2_studio import evaluation
    from empo2_studio.envs import EnvPool
    from empo2_studio.memory import make_embedder, open_tip_store

    cfg = session.config
    policy, iteration = _load_frozen_policy(session)
    store = open_tip_store(session.tips_path, make_embedder(cfg.memory.embedder), cfg.memory, env=cfg.env)
    envs = EnvPool(cfg.env)
    try:
        with tqdm(total=cmd.trials + 1, desc=f"adapt {cmd.task}", unit="trial") as bar:
            rows = evaluation.adapt(
                policy, envs, store, cfg, session, cmd.task, iteration=iteration, trials=cmd.trials,
                on_trial=lambda row: bar.update(1),
            )  # fmt: skip
    finally:
        envs.close()
    for row in rows:
        print(json.dumps(row) if cmd.json else "  ".join(f"{k}={fmt(v)}" for k, v in row.items()))
    return OK


def run_distill(cmd: DistillCmd) -> int:
    if bool(cmd.episodes) == cmd.all_memory:
        raise UsageError("give exactly one of --episodes id,id,... or --all-memory")
    if cmd.episodes is not None and not cmd.episodes.replace(",", "").strip():  # before the model loads
        raise UsageError(f"--episodes names no episode id, got {cmd.episodes!r}")
    session = open_session(cmd.session, cmd.sessions_dir)
    if cmd.all_memory:
        ids = [e.episode_id for e in session.episodes() if e.rollout_mode == "memory" and e.update_mode is not None]
        if not ids:
            raise UsageError(f"session {session.run_id!r} has no memory-mode training episodes")
    else:
        ids = [i.strip() for i in (cmd.episodes or "").split(",") if i.strip()]
        try:
            session.episodes(ids)
        except KeyError as e:
            raise UsageError(message(e)) from None
    trainer = _load_trainer(session, require_checkpoint=False)
    try:
        report = trainer.distill(ids)
        path = trainer.save_checkpoint()
    finally:
        trainer.close()
    _print_metrics(report.metrics, as_json=False)
    print(f"distilled {len(ids)} episode(s); checkpoint {path}" + (" (update skipped: non-finite)" if report.skipped_update else ""))
    return OK


RUNNERS = {
    "app": run_app, "train": run_train, "eval": run_eval, "adapt": run_adapt, "distill": run_distill,
    "tips": run_tips, "sessions": run_sessions,
}  # fmt: skip


# ---- helpers ---------------------------------------------------------------------------------------


def _load_trainer(session: Session, *, require_checkpoint: bool) -> Any:
    """The session's trainer at its latest checkpoint, or with fresh LoRA weights when it has none."""
    from empo2_studio.trainer import Trainer  # torch loads only here

    if session.latest_checkpoint() is not None:
        return Trainer.resume(session)
    if require_checkpoint:
        raise UsageError(f"session {session.run_id!r} has no checkpoint to resume from")
    return Trainer(session.config, session)


def _load_frozen_policy(session: Session) -> tuple[Any, int]:
    """The session's policy with the adapter of its latest complete checkpoint (or the weights a new
    run starts from) and that checkpoint's iteration, for playing only: no trainer, no optimizer."""
    from empo2_studio.policy import load_policy  # torch loads only here
    from empo2_studio.trainer import latest_complete_checkpoint

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    latest = latest_complete_checkpoint(session)
    if latest is None:
        return load_policy(session.config.policy), 0
    iteration, path = latest  # the checkpoint replaces the warm start, whose folder may have moved since
    return load_policy(replace(session.config.policy, adapter=str(path))), iteration


class _StopOnInterrupt:
    """First Ctrl-C sets the stop event (training ends after the current step); the second aborts."""

    def __enter__(self) -> threading.Event:
        self.event = threading.Event()
        self._previous = None
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self.event

    def _handle(self, signum: int, frame: Any) -> None:
        if self.event.is_set():
            raise KeyboardInterrupt
        self.event.set()
        print("\nstopping after the current step (Ctrl-C again to abort)", file=sys.stderr, flush=True)

    def __exit__(self, *exc: Any) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


def _print_metrics(metrics: dict[str, Any], *, as_json: bool) -> None:
    if as_json:
        print(json.dumps(metrics))
        return
    for k in sorted(metrics):
        print(f"{k:<32} {fmt(metrics[k])}")


if __name__ == "__main__":
    sys.exit(main())
