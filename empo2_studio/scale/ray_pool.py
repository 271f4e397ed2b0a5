"""`RayEnvPool`: env instances in Ray worker processes (one actor, hence one JVM, per instance).

Each `RemoteEnv` is a `TextEnv` (envs/__init__.py) whose calls run in its actor, so `play_group`
needs no change: a group of 8 ScienceWorld episodes plays on 8 JVMs in 8 worker processes, on this
machine or on a Ray cluster's nodes. The rollout steps the episodes of a lock-step one after another
(as with local envs); what moves is where the JVMs live and whose memory they use. Static answers
(task names, splits, step limits, few-shot examples) are fetched once per instance.

Shutdown: `close()` closes every env in its actor (ScienceWorld stops its JVM and waits for it),
kills the actors, and shuts Ray down if this pool started it; each actor reports its JVM's pid so
tests can check no `java` outlives the pool. Needs `pip install 'empo2-studio[scale]'` (ray).
"""

from __future__ import annotations

from typing import Any

ACTOR_CPUS = 0.0
"""CPUs each env actor reserves: 0, so a group of 8 fits `ray.init(num_cpus=2)` (JVM steps are short)."""


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ImportError("scale.env_pool 'ray' needs Ray: pip install 'empo2-studio[scale]'") from None
    return ray


class _EnvWorker:
    """Lives in a Ray worker process: one env instance and its calls."""

    def __init__(self, env_cfg: Any) -> None:
        from empo2_studio.envs import make_env

        self.env = make_env(env_cfg)

    def call(self, method: str, *args: Any) -> Any:
        return getattr(self.env, method)(*args)

    def name(self) -> str:
        return self.env.name

    def java_pid(self) -> int | None:
        proc = getattr(self.env, "java_process", None)
        return None if proc is None else proc.pid

    def close(self) -> None:
        self.env.close()


class RemoteEnv:
    """A `TextEnv` proxy for one `_EnvWorker` actor (same methods, same errors re-raised here)."""

    def __init__(self, actor: Any, ray: Any) -> None:
        self._actor, self._ray = actor, ray
        self.name = ray.get(actor.name.remote())
        self._static: dict[tuple, Any] = {}

    def _call(self, method: str, *args: Any) -> Any:
        try:
            return self._ray.get(self._actor.call.remote(method, *args))
        except self._ray.exceptions.RayTaskError as e:  # the env's own ValueError etc., unwrapped
            cause = e.as_instanceof_cause()
            raise (cause.cause if getattr(cause, "cause", None) is not None else cause) from None

    def _cached(self, method: str, *args: Any) -> Any:
        key = (method, *args)
        if key not in self._static:
            self._static[key] = self._call(method, *args)
        return self._static[key]

    def task_names(self) -> tuple[str, ...]:
        return self._cached("task_names")

    def variations(self, task: str, split: str) -> tuple[int, ...]:
        return self._cached("variations", task, split)

    def step_limit(self, task: str) -> int:
        return self._cached("step_limit", task)

    def fewshot_examples(self, task: str) -> tuple[str, ...]:
        return self._cached("fewshot_examples", task)

    def reset(self, task: str, variation: int) -> Any:
        return self._call("reset", task, variation)

    def step(self, action_text: str) -> Any:
        return self._call("step", action_text)

    def summarise_episode(self, episode: Any) -> str | None:
        return self._call("summarise_episode", episode)

    def places(self, task: str) -> tuple[str, ...]:
        return self._cached("places", task)

    def place_of(self, observation: str) -> str | None:
        return self._call("place_of", observation)

    def java_pid(self) -> int | None:
        """The pid of this instance's JVM (None before its first reset, or for the trap env)."""
        return self._ray.get(self._actor.java_pid.remote())

    def close(self) -> None:
        self._ray.get(self._actor.close.remote())


class RayEnvPool:
    """Env instances of `env_cfg` (an EnvConfig) in Ray actors.

    Args:
        env_cfg: what each actor builds with `envs.make_env`.
        address: a Ray cluster to join; None starts (or reuses) a local Ray.
        num_cpus: CPUs for a local Ray started here (None: Ray's default, all of them).

    Raises:
        ImportError: Ray is not installed (names the extra to install).
    """

    def __init__(self, env_cfg: Any, *, address: str | None = None, num_cpus: int | None = None) -> None:
        self._ray = ray = _ray()
        self._started = not ray.is_initialized()
        if self._started:
            ray.init(address=address, num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
        self._cls = ray.remote(num_cpus=ACTOR_CPUS)(_EnvWorker)
        self.env_cfg = env_cfg
        self._envs: list[RemoteEnv] = []
        self._actors: list[Any] = []
        self.java_pids: set[int] = set()
        """Every JVM pid an actor reported (collected at close, for the no-java-left check)."""

    def envs(self, n: int) -> list[RemoteEnv]:
        """The first `n` remote envs, starting missing actors (all at once, in parallel)."""
        missing = n - len(self._envs)
        if missing > 0:
            actors = [self._cls.remote(self.env_cfg) for _ in range(missing)]
            self._actors += actors
            self._envs += [RemoteEnv(a, self._ray) for a in actors]
        return self._envs[:n]

    def close(self) -> None:
        """Close every env in its actor, kill the actors, and stop Ray if this pool started it. Idempotent."""
        ray = self._ray
        if self._envs:
            pids = ray.get([a.java_pid.remote() for a in self._actors])
            self.java_pids |= {p for p in pids if p is not None}
            ray.get([a.close.remote() for a in self._actors])
            for a in self._actors:
                ray.kill(a)
        self._envs, self._actors = [], []
        if self._started and ray.is_initialized():
            ray.shutdown()
            self._started = False
