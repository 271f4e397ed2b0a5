"""The Ray env pool: ScienceWorld groups on JVMs in Ray worker processes, no java left behind."""

from __future__ import annotations

import os

import pytest

ray = pytest.importorskip("ray")

from empo2_studio.config import EnvConfig  # noqa: E402
from empo2_studio.rollout import play_group, seed_policy  # noqa: E402
from empo2_studio.scale.ray_pool import RayEnvPool  # noqa: E402


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow  # starts Ray (tens of seconds)
def test_trap_envs_behind_the_protocol_and_errors_come_back(tiny_policy):
    pool = RayEnvPool(EnvConfig(name="trap", step_limit=3), num_cpus=2)
    try:
        envs = pool.envs(2)
        assert [e.name for e in envs] == ["trap", "trap"] and len(pool.envs(2)) == 2
        assert envs[0].variations("trap-light-bulb", "test") == tuple(range(36, 48))
        with pytest.raises(ValueError, match="nope"):
            envs[0].reset("nope", 0)
        seed_policy(tiny_policy, 0)
        eps = play_group(envs, tiny_policy, None, task="trap-light-bulb", variation=0, split="train",
                         rollout_mode="naive", update_mode="on-policy", temperature=1.0, seed=0)  # fmt: skip
        assert len(eps) == 2 and all(1 <= len(ep.steps) <= 3 for ep in eps)
        obs = envs[1].reset("trap-light-bulb", 0)  # the same layout as a local env
        from empo2_studio.envs import make_env

        assert obs == make_env(EnvConfig(name="trap", step_limit=3)).reset("trap-light-bulb", 0)
    finally:
        pool.close()
    assert not ray.is_initialized()


@pytest.mark.scienceworld
@pytest.mark.slow
def test_a_group_of_8_scienceworld_episodes_on_8_jvms_leaves_no_java(tiny_policy):
    pool = RayEnvPool(EnvConfig(name="scienceworld", task="find-living-thing", step_limit=2), num_cpus=2)
    try:
        envs = pool.envs(8)
        seed_policy(tiny_policy, 0)
        eps = play_group(envs, tiny_policy, None, task="find-living-thing", variation=0, split="train",
                         rollout_mode="naive", update_mode="on-policy", temperature=1.0, seed=0)  # fmt: skip
        assert len(eps) == 8 and all(ep.env == "scienceworld" and 1 <= len(ep.steps) <= 2 for ep in eps)
        pids = [e.java_pid() for e in envs]
        assert len(set(pids)) == 8 and all(_alive(p) for p in pids)  # 8 JVMs, one per actor
        assert os.getpid() not in {int(open(f"/proc/{p}/stat").read().split(")")[-1].split()[1]) for p in pids}
    finally:
        pool.close()
    assert pool.java_pids == set(pids)
    assert not any(_alive(p) for p in pids), "a java process outlived the pool"
