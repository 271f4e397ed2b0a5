"""`empo2-studio train` under a launcher (torchrun / accelerate launch), or with vLLM / Ray options.

    torchrun --nproc_per_node 2 -m empo2_studio train --env.name trap --rollout.variations-per-iteration 2 …
    torchrun --nproc_per_node 2 -m empo2_studio train --resume RUN_ID

Rank 0 validates the flags and creates the session; its run id is broadcast and the other ranks open
the same session. A usage error found on rank 0 is raised on every rank (exit 2 everywhere).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import Any

from empo2_studio.scale import check_launch


def run_train_distributed(cmd: Any, cli: Any) -> int:
    """The `train` command on this rank; returns the exit code. Raises cli.UsageError like `run_train`.

    `cli` is the `empo2_studio.cli` module, passed in by its `run_train`: its checks and training loop
    are reused here, and this layer sits below the CLI (it never imports it).
    """
    from empo2_studio.scale.trainer import DistributedTrainer
    from empo2_studio.sessions import Session

    resumed = cli.open_session(cmd.resume, cmd.sessions_dir) if cmd.resume else None
    ctx = join(resumed.config if resumed is not None else cmd.run)
    try:
        if resumed is not None:
            session = resumed
            cli.refuse_config_change(session, cmd.run)
            _usage(cli, lambda: check_launch(session.config, ctx.world_size, resuming=True))
            trainer = DistributedTrainer.resume(session, ctx=ctx)
            total = session.config.train.iterations
            todo = cmd.more if cmd.more is not None else total - trainer.iteration
            if todo < 1:
                if ctx.is_main:
                    print(f"{session.run_id}: already at iteration {trainer.iteration} of {total}; use --more N")
                return cli.OK
        else:
            if cmd.more is not None:
                raise cli.UsageError("--more only applies with --resume; use --train.iterations for a new run")
            cfg = cmd.run
            _usage(cli, lambda: check_launch(cfg, ctx.world_size, resuming=False))
            cfg = replace(cfg, scale=replace(cfg.scale, processes=ctx.world_size))
            made: tuple[str, str] = ("", "")
            if ctx.is_main:
                try:
                    cli.check_env(cfg)
                    cli.check_adapter(cfg)
                    made = (Session.create(cli.session_root(cmd.sessions_dir), cfg).run_id, "")
                except (cli.UsageError, ValueError, FileExistsError) as e:
                    made = ("", str(e))
            run_id, error = ctx.broadcast(made)
            if error:
                raise cli.UsageError(error)
            session = Session.open(cli.session_root(cmd.sessions_dir), run_id)
            try:
                trainer = DistributedTrainer(session.config, session, ctx=ctx)
            except ValueError as e:  # the config names something the model lacks: as `run_train`
                if ctx.is_main:
                    cli.discard_new_session(session)
                raise cli.UsageError(cli.message(e)) from None
            if ctx.is_main:
                print(f"session {session.run_id} in {session.dir} ({ctx.world_size} processes, {ctx.backend})", file=sys.stderr)
            todo = session.config.train.iterations
        if ctx.is_main:
            return cli._train_loop(trainer, todo)
        with cli._StopOnInterrupt() as stop:
            try:
                trainer.train(todo, stop=stop)
            finally:
                trainer.close()
        return cli.OK
    finally:
        ctx.close()


def join(cfg: Any) -> Any:
    """This rank's `dist.DistContext` for a run with config `cfg`: CPU + gloo when its policy runs on
    the CPU (`policy.device` "cpu", or "auto" without CUDA), else nccl on this rank's GPU."""
    from empo2_studio.scale.dist import DistContext, wants_cpu

    return DistContext.from_env(cpu=wants_cpu(cfg.policy.device))


def _usage(cli: Any, check: Any) -> None:
    try:
        check()
    except ValueError as e:
        raise cli.UsageError(str(e)) from None
