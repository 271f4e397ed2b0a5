"""The vLLM sampler against a stand-in server on 127.0.0.1 that speaks vLLM's completions API."""

from __future__ import annotations

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

from empo2_studio.config import AlgoConfig, EnvConfig
from empo2_studio.envs import make_env
from empo2_studio.policy import ActionRequest, Turn
from empo2_studio.rollout import play_group, seed_policy
from empo2_studio.scale.vllm_sampler import VLLMPolicy, VLLMServerError
from empo2_studio.update import UpdateSettings, conversation, policy_update

ACTION = "go to kitchen"
SERVER_LOGPROB = -0.5


class StandIn:
    """A tiny HTTP server: /v1/completions answers ACTION (+ newline) as token ids, each with log-prob
    SERVER_LOGPROB; /v1/load_lora_adapter and /v1/unload_lora_adapter record and accept."""

    def __init__(self, tokenizer, *, wrong_model: bool = False, status: int = 200):
        self.ids = tokenizer.encode(ACTION + "\n", add_special_tokens=False)
        self.calls: list[tuple[str, dict]] = []
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stand_in.calls.append((self.path, body))
                if status != 200:
                    return self._send(status, {"error": "overloaded"})
                if self.path == "/v1/completions":
                    toks = stand_in.ids[: body["max_tokens"]]
                    model = "someone-else" if wrong_model else body["model"]
                    return self._send(200, {"model": model, "choices": [{"text": ACTION, "logprobs": {
                        "tokens": [f"token_id:{t}" for t in toks], "token_logprobs": [SERVER_LOGPROB] * len(toks)}}]})
                if self.path in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter"):
                    return self._send(200, {"ok": True})
                self._send(404, {"error": "no route"})

            def _send(self, code, obj):
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def free_policy():
    from empo2_studio.policy import build_tiny_policy

    torch.set_num_threads(1)
    return build_tiny_policy(decoding="free", seed=0)


@pytest.fixture
def stand_in(free_policy):
    s = StandIn(free_policy.tokenizer)
    yield s
    s.close()


def _request(key: str) -> ActionRequest:
    return ActionRequest(key, (Turn("You are in the hallway. Task: turn on the bulb.", None, ("go to kitchen",)),))


def test_sample_sends_the_local_prompt_ids_and_returns_ids_and_behaviour_logprobs(free_policy, stand_in):
    policy = VLLMPolicy(free_policy, [stand_in.url])
    out = policy.sample([_request("a"), _request("b")], temperature=0.7)
    assert [s.text for s in out] == [ACTION, ACTION]
    assert all(s.token_ids == tuple(stand_in.ids) and s.logprobs == (SERVER_LOGPROB,) * len(stand_in.ids) for s in out)
    paths = [p for p, _ in stand_in.calls]
    assert paths == ["/v1/completions"] * 2
    for _, body in stand_in.calls:
        assert body["prompt"] == free_policy.prompt_ids(_request("a").turns)  # the exact local prompt
        assert body["model"] == free_policy.base_model_name and body["temperature"] == 0.7
        assert body["max_tokens"] == free_policy.max_action_tokens and body["logprobs"] == 1
        assert body["return_tokens_as_token_ids"] is True and body["stop"] == ["\n"]
    assert policy.version == free_policy.base_model_name and policy.decoding == "free"


def test_every_request_asks_for_the_plain_tempered_softmax_the_trainer_scores(free_policy, stand_in):
    """vLLM fills a parameter a request leaves out from the model's generation_config.json (Qwen2.5:
    top_k 20, top_p 0.8, repetition_penalty 1.05): every sampling and tip request names the neutral
    value of each one (vLLM's API: top_k -1 = all tokens)."""
    policy = VLLMPolicy(free_policy, [stand_in.url])
    policy.sample([_request("a")], temperature=0.7)
    policy.write_tips([(Turn("You are in the hallway.", (5,)),)], "Write a tip.")
    neutral = {"top_p": 1.0, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0, "presence_penalty": 0.0,
               "frequency_penalty": 0.0}  # fmt: skip
    bodies = [b for p, b in stand_in.calls if p == "/v1/completions"]
    assert len(bodies) == 2 and all({k: b.get(k) for k in neutral} == neutral for b in bodies)
    assert [b["temperature"] for b in bodies] == [0.7, 0.0]


def test_adapter_paths_reach_the_servers_absolute(free_policy, stand_in, tmp_path, monkeypatch):
    """The trainer names served adapters under ./sessions by default; a server started in another
    directory must still find them."""
    monkeypatch.chdir(tmp_path)
    VLLMPolicy(free_policy, [stand_in.url]).publish_adapter("sessions/run/served/a1", "a1")
    assert stand_in.calls == [("/v1/load_lora_adapter", {"lora_name": "a1", "lora_path": str(tmp_path / "sessions/run/served/a1")})]


def test_publish_adapter_loads_it_on_every_server_and_later_requests_name_it(free_policy, stand_in, tmp_path):
    other = StandIn(free_policy.tokenizer)
    try:
        policy = VLLMPolicy(free_policy, [stand_in.url, other.url])
        policy.publish_adapter(str(tmp_path / "run-it000001"), "run-it000001")
        policy.publish_adapter(str(tmp_path / "run-it000002"), "run-it000002")
        for s in (stand_in, other):
            assert s.calls == [
                ("/v1/load_lora_adapter", {"lora_name": "run-it000001", "lora_path": str(tmp_path / "run-it000001")}),
                ("/v1/load_lora_adapter", {"lora_name": "run-it000002", "lora_path": str(tmp_path / "run-it000002")}),
                ("/v1/unload_lora_adapter", {"lora_name": "run-it000001"}),
            ]
        policy.sample([_request(k) for k in "abcdefgh"], temperature=1.0)
        bodies = [b for s in (stand_in, other) for p, b in s.calls if p == "/v1/completions"]
        assert len(bodies) == 8 and {b["model"] for b in bodies} == {"run-it000002"}
        assert policy.version == "run-it000002"
        before = len(stand_in.calls)
        rank1 = VLLMPolicy(free_policy, [stand_in.url])  # a rank > 0 only switches the name
        rank1.publish_adapter("/x", "run-it000002", load=False)
        assert rank1.model_name == rank1.version == "run-it000002" and len(stand_in.calls) == before
    finally:
        other.close()


def test_constrained_decoding_is_refused_with_the_reason(tiny_policy, stand_in):
    with pytest.raises(ValueError, match="supports policy.decoding 'free' only, got 'constrained'"):
        VLLMPolicy(tiny_policy, [stand_in.url])
    with pytest.raises(ValueError, match="at least one server URL"):
        VLLMPolicy(tiny_policy, [])


def test_server_errors_and_wrong_replies_name_the_server(free_policy):
    for kw, match in (({"status": 503}, "HTTP 503"), ({"wrong_model": True}, "answered with model 'someone-else'")):
        s = StandIn(free_policy.tokenizer, **kw)
        try:
            with pytest.raises(VLLMServerError, match=match) as err:
                VLLMPolicy(free_policy, [s.url]).sample([_request("a")], temperature=1.0)
            assert s.url in str(err.value)
        finally:
            s.close()
    with pytest.raises(VLLMServerError, match="127.0.0.1:9"):  # nothing listens on the discard port
        VLLMPolicy(free_policy, ["http://127.0.0.1:9"], timeout=2).sample([_request("a")], temperature=1.0)


def test_the_update_uses_server_logprobs_as_old_and_local_scores_as_current(free_policy, stand_in):
    """Ratios are exp(local − server), never collapsed to 1 (design.md §11), hand-checked per token."""
    policy = VLLMPolicy(free_policy, [stand_in.url])
    envs = [make_env(EnvConfig(name="trap", step_limit=2)) for _ in range(2)]
    seed_policy(policy, 0)
    episodes = play_group(envs, policy, None, task="trap-light-bulb", variation=0, split="train",
                          rollout_mode="naive", update_mode="on-policy", temperature=1.0, seed=0)  # fmt: skip
    assert all(s.sample.logprobs == (SERVER_LOGPROB,) * len(stand_in.ids) for ep in episodes for s in ep.steps)
    with torch.no_grad():
        local = torch.cat([lp for ep in episodes for lp in free_policy.score([conversation(ep, "on-policy")])[0]])
    ratios = torch.exp(local - SERVER_LOGPROB)
    opt = torch.optim.SGD(free_policy.trainable_parameters(), lr=0.0)
    settings = UpdateSettings(algo=AlgoConfig(low_prob_mask="off"), grad_clip=1e9)
    m = policy_update(policy, opt, episodes, [1.0, -1.0], "on-policy", settings)
    assert m["ratio/mean"] == pytest.approx(float(ratios.mean()), rel=1e-4)
    assert m["ratio/max"] == pytest.approx(float(ratios.max()), rel=1e-4)
    assert m["ratio/min"] == pytest.approx(float(ratios.min()), rel=1e-4)
    assert not math.isclose(m["ratio/mean"], 1.0, abs_tol=1e-2)


def test_the_trainer_serves_its_starting_adapter_then_each_update(free_policy, stand_in, tmp_path):
    """One process (world size 1) with the vLLM sampler: the servers load the starting adapter before the
    first rollout and a new one after every update; episodes record the adapter that sampled them."""
    from empo2_studio.config import MemoryConfig, PolicyConfig, RolloutConfig, RunConfig, ScaleConfig
    from empo2_studio.memory import make_embedder
    from empo2_studio.scale.dist import DistContext
    from empo2_studio.scale.trainer import DistributedTrainer
    from empo2_studio.sessions import Session

    cfg = RunConfig(
        run_id="v", env=EnvConfig(name="trap", variations=(0,), step_limit=2), policy=PolicyConfig(decoding="free"),
        memory=MemoryConfig(embedder="hash"), rollout=RolloutConfig(group_size=2, forced_mode="on-policy"),
        scale=ScaleConfig(sampler="vllm", vllm_urls=(stand_in.url,)),
    )  # fmt: skip
    session = Session.create(tmp_path, cfg)
    ctx = DistContext(rank=0, world_size=1, device=torch.device("cpu"), backend="none")
    trainer = DistributedTrainer(cfg, session, ctx=ctx, policy=VLLMPolicy(free_policy, [stand_in.url]),
                                 embedder=make_embedder("hash"))  # fmt: skip
    loads = [b["lora_name"] for p, b in stand_in.calls if p == "/v1/load_lora_adapter"]
    assert len(loads) == 1 and loads[0].startswith("v-it000000-")
    assert (session.dir / "served" / loads[0] / "adapter_config.json").is_file()
    report = trainer.step()
    calls = stand_in.calls
    completions = [b["model"] for p, b in calls if p == "/v1/completions"]
    assert completions and set(completions) == {loads[0]}  # every rollout and tip request named it
    loads = [b["lora_name"] for p, b in calls if p == "/v1/load_lora_adapter"]
    assert len(loads) == 2 and loads[1].startswith("v-it000001-")
    assert [b["lora_name"] for p, b in calls if p == "/v1/unload_lora_adapter"] == [loads[0]]
    episodes = session.episodes(list(report.episode_ids))
    assert {ep.policy_version for ep in episodes} == {loads[0]} and trainer.policy.version == loads[1]
    trainer.close()
