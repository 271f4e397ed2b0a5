"""`VLLMPolicy`: rollout actions sampled by vLLM servers, everything else by the local HF policy.

vLLM serves the base model with LoRA adapters loaded by name (OpenAI-compatible API, started with
`--enable-lora` and `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`). Each request is a `/v1/completions`
call whose `prompt` is the exact token ids the local sampler would feed (`HFPolicy.prompt_ids`), with
`return_tokens_as_token_ids` so the reply names token ids, and `logprobs` so it carries each sampled
token's behaviour log-prob. After every update the trainer saves the adapter and `publish_adapter`
loads it on every server under a new name; later requests ask for that name, and a reply naming
another model is refused, so an episode's `policy_version` is the adapter that really sampled it.

Log-probs: the server's log-probs are stored as `ActionSample.logprobs` — the *behaviour* (old)
log-probs. The update always re-scores the current log-probs with the local model
(`HFPolicy.score`), so the server's numbers are never taken for the current policy's; a ratio that
reads exactly 1 would need the two to agree, which they do only up to the engines' numerics (and
off-policy turns differ by the tips). vLLM returns the log-probs of softmax(logits / T) only when
started with `--logprobs-mode processed_logprobs` (vLLM ≥ 0.10.2); otherwise its log-probs are at
T = 1 and the behaviour log-probs would be wrong at any T ≠ 1 (greedy, T = 0, is scored at 1 anyway).

Constrained decoding is not supported: vLLM's guided decoding masks by grammar (any tokenisation of
a valid action), not by the trie of canonical tokenisations the trainer re-scores with, so the
behaviour log-probs would be of another distribution. `VLLMPolicy` refuses a constrained policy.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import torch

from empo2_studio.policy import ActionRequest, Turn, instruction_list
from empo2_studio.types import ActionSample

NEUTRAL_SAMPLING = {"top_p": 1.0, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0,
                    "presence_penalty": 0.0, "frequency_penalty": 0.0}
"""Sent with every completion: the plain softmax(logits / T) the trainer re-scores. A parameter a request
leaves out is taken from the model's generation_config.json (Qwen2.5-Instruct: top_k 20, top_p 0.8,
repetition_penalty 1.05), which would truncate and penalise the sampled distribution and bias every
importance ratio. top_k -1 = all tokens (every vLLM version; newer ones also take 0)."""

TOKEN_PREFIX = "token_id:"
"""How vLLM names a token when `return_tokens_as_token_ids` is set."""


class VLLMServerError(RuntimeError):
    """A vLLM server answered with an error or a reply this client cannot use (names the URL)."""


class VLLMPolicy:
    """A `Policy` whose `sample` and `write_tips` go to vLLM; `score`, adapters and the trainable
    parameters stay with `local` (an `HFPolicy` in free decoding).

    Args:
        local: the HFPolicy that trains (its tokenizer and chat format build the prompts).
        urls: server base URLs (http://host:port); each episode sticks to one (prefix caching).
        served_model: the base model's name on the servers (`--served-model-name`); default
            `local.base_model_name`.
        timeout: seconds per HTTP request.
        client: an `httpx.Client` to use (tests); default one of our own.

    Raises:
        ValueError: no URLs, or `local.decoding` is "constrained" (see the module docstring).
    """

    def __init__(self, local: Any, urls: Sequence[str], *, served_model: str | None = None,
                 timeout: float = 120.0, client: httpx.Client | None = None) -> None:  # fmt: skip
        if not urls:
            raise ValueError("VLLMPolicy needs at least one server URL (scale.vllm_urls), got none")
        if local.decoding != "free":
            raise ValueError(
                f"the vLLM sampler supports policy.decoding 'free' only, got {local.decoding!r}: vLLM's guided "
                "decoding masks differ from the action trie the trainer re-scores with; use --policy.decoding free "
                "or --scale.sampler hf"
            )
        self.local = local
        self.urls = [u.rstrip("/") for u in urls]
        self.model_name = served_model or local.base_model_name
        self.base_name = self.model_name
        self.client = client or httpx.Client(timeout=timeout)
        self.version = self.model_name
        """The served model or adapter name the next samples come from (recorded as `policy_version`)."""

    def __getattr__(self, name: str) -> Any:  # model, tokenizer, chat_format, generator, score, ...
        return getattr(self.local, name)

    @property
    def decoding(self) -> str:
        return self.local.decoding

    # ---- sampling ----------------------------------------------------------------------------
    def sample(self, requests: Sequence[ActionRequest], *, temperature: float) -> list[ActionSample]:
        """One completion per request, concurrently; see `Policy.sample`. Raises ValueError on a bad
        batch (as HFPolicy) and VLLMServerError on an HTTP error or an unusable reply."""
        self.local._check_requests(requests, temperature)
        prompts = [self.local.prompt_ids(r.turns) for r in requests]
        seeds = torch.randint(0, 2**31 - 1, (len(requests),), generator=self.local.generator).tolist()
        bodies = [self._body(p, self.local.max_action_tokens, temperature, s) for p, s in zip(prompts, seeds)]
        urls = [self._url_for(r.key) for r in requests]
        return self._complete_all(urls, bodies)

    def write_tips(self, conversations: Sequence[Sequence[Turn]], instruction: str | Sequence[str], *,
                   keys: Sequence[str] | None = None) -> list[str]:  # fmt: skip
        """Greedy one-line tips from the servers (no KV cache to reuse: `keys` only pick servers)."""
        instructions = instruction_list(instruction, conversations, keys)
        prompts = [self.local.prompt_ids(list(c) + [Turn(t, None)]) for c, t in zip(conversations, instructions)]
        bodies = [self._body(p, self.local.max_tip_tokens, 0.0, 0) for p in prompts]
        names = list(keys) if keys is not None else [str(i) for i in range(len(prompts))]
        return [s.text for s in self._complete_all([self._url_for(k) for k in names], bodies)]

    def forget(self, key: str) -> None:
        """Nothing is cached on this side (vLLM's prefix cache manages itself)."""

    def publish_adapter(self, path: str, name: str, *, load: bool = True) -> None:
        """Make adapter `name` (a PEFT directory at `path`, readable by the servers) the one sampled from.
        The servers get `path` made absolute here (a server runs in its own working directory).

        With `load`, POST `/v1/load_lora_adapter` to every server, then unload the previous adapter;
        without it (ranks > 0, after rank 0 loaded it) only switch the name. Raises VLLMServerError.
        """
        previous = self.model_name
        if load:
            for url in self.urls:
                self._post(url, "/v1/load_lora_adapter", {"lora_name": name, "lora_path": os.path.abspath(path)})
            if previous != self.base_name:
                for url in self.urls:
                    self._post(url, "/v1/unload_lora_adapter", {"lora_name": previous})
        self.model_name = name
        self.version = name

    # ---- HTTP --------------------------------------------------------------------------------
    def _body(self, prompt: list[int], max_tokens: int, temperature: float, seed: int) -> dict[str, Any]:
        tok = self.local.tokenizer
        stop_ids = [t for t in (self.local.chat_format.eot_id, tok.eos_token_id) if t is not None]
        return {
            "model": self.model_name, "prompt": prompt, "max_tokens": int(max_tokens),
            "temperature": float(temperature), "seed": int(seed), "n": 1, "logprobs": 1,
            "return_tokens_as_token_ids": True, "stop": ["\n"], "stop_token_ids": stop_ids,
            "skip_special_tokens": True, **NEUTRAL_SAMPLING,
        }  # fmt: skip

    def _url_for(self, key: str) -> str:
        return self.urls[zlib.crc32(key.encode()) % len(self.urls)]

    def _complete_all(self, urls: list[str], bodies: list[dict[str, Any]]) -> list[ActionSample]:
        if len(bodies) == 1:
            return [self._complete(urls[0], bodies[0])]
        with ThreadPoolExecutor(max_workers=min(len(bodies), 32)) as pool:
            return list(pool.map(self._complete, urls, bodies))

    def _complete(self, url: str, body: dict[str, Any]) -> ActionSample:
        reply = self._post(url, "/v1/completions", body)
        if reply.get("model") != body["model"]:
            raise VLLMServerError(f"{url} answered with model {reply.get('model')!r}, asked for {body['model']!r}")
        try:
            lp = reply["choices"][0]["logprobs"]
            names, logps = lp["tokens"], lp["token_logprobs"]
        except (KeyError, IndexError, TypeError):
            raise VLLMServerError(f"{url}: reply without choices[0].logprobs.tokens/token_logprobs: {str(reply)[:300]}") from None
        if len(names) != len(logps):
            raise VLLMServerError(f"{url}: {len(names)} tokens but {len(logps)} log-probs")
        ids = [_token_id(url, n) for n in names]
        if any(x is None or not (x <= 0.0) for x in logps):
            raise VLLMServerError(f"{url}: a sampled token has no finite log-prob ≤ 0: {logps}")
        text = self.local.tokenizer.decode(ids, skip_special_tokens=True).strip()
        return ActionSample(text=text, token_ids=tuple(ids), logprobs=tuple(float(x) for x in logps))

    def _post(self, url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            r = self.client.post(url + path, json=body)
        except httpx.HTTPError as e:
            raise VLLMServerError(f"{url}{path}: {type(e).__name__}: {e}") from None
        if r.status_code != 200:
            raise VLLMServerError(f"{url}{path}: HTTP {r.status_code}: {r.text[:300]}")
        try:
            return r.json()
        except ValueError:
            return {"text": r.text}


def _token_id(url: str, name: Any) -> int:
    if not isinstance(name, str) or not name.startswith(TOKEN_PREFIX):
        raise VLLMServerError(f"{url}: token {name!r} is not '{TOKEN_PREFIX}N' (send return_tokens_as_token_ids)")
    try:
        return int(name[len(TOKEN_PREFIX):])
    except ValueError:
        raise VLLMServerError(f"{url}: token {name!r} is not '{TOKEN_PREFIX}N'") from None
