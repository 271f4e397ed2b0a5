"""Many episodes' KV caches as one left-padded batch (`BatchState`), for one forward per decoding
position over all episodes (`sampling.CachedSampler.sample_batch`).

Host ↔ device traffic: the batch's bookkeeping (which columns are padding, each row's next position)
lives in Python lists on the host, so cutting a finished row out or dropping padding columns never
reads the device; the model's inputs of one forward (ids, its attention-mask block, position ids)
go up as one packed tensor (`upload`: pinned and non-blocking on CUDA, so it does not wait for the
GPU), and the attention mask grows on the device.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch


def upload(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`t` (a host tensor) on `device`: on CUDA through pinned memory without blocking the host (the
    copy is queued on the stream before the kernels that read it); on the CPU `t` itself."""
    if device.type == "cpu":
        return t
    if device.type == "cuda":
        t = t.pin_memory()
    return t.to(device, non_blocking=True)


def _emptied(t: torch.Tensor) -> torch.Tensor:
    """A (B, H, 0, D) tensor like `t` that holds none of its memory (a slice would keep it alive)."""
    return t.new_zeros(t.shape[:2] + (0,) + t.shape[3:])


def cache_from_tensors(kv: Sequence[tuple[torch.Tensor, torch.Tensor]], config: Any = None) -> Any:
    """A DynamicCache whose layer l holds `kv[l]` = (keys, values), each (B, H, T, D), without a copy."""
    from transformers import DynamicCache

    cache = DynamicCache(config=config)
    for layer, (k, v) in zip(cache.layers, kv):
        layer.lazy_initialization(k, v)
        layer.keys, layer.values = k, v
    return cache


def plain_layers(cache: Any) -> bool:
    """True when every layer is a full-attention DynamicLayer (left padding is only exact there)."""
    from transformers.cache_utils import DynamicLayer

    return all(type(layer) is DynamicLayer for layer in cache.layers)


class BatchState:
    """Many episodes' caches as one left-padded batch: a DynamicCache (B, H, T, D) per layer, the
    attention mask (B, T) with 0 on padding (also padding inside a ragged block of new tokens) —
    `mask` on the host as lists, `mask_dev` on the device — and per row the next position id `pos`
    (B,) = real tokens so far. Rows are episodes `rows[b]`.

    Building it moves each episode's cache into the batch layer by layer: a source layer is emptied
    once every row has been copied from it, so the episodes' caches and the padded batch are never
    both held whole (the peak is one layer above the batch). The `states`' caches are unusable
    afterwards: `CachedSampler` gives each episode its cache back with `extract`.
    """

    def __init__(self, states: Sequence[Any], rows: Sequence[int], config: Any, device: torch.device | None = None):
        self.config = config
        self.rows = list(rows)
        lens = [len(states[i].ids) for i in self.rows]
        width = max(lens)
        ref = next((states[i].cache for i in self.rows if len(states[i].ids)), None)
        self.pos = list(lens)
        self.mask = [[0] * (width - n) + [1] * n for n in lens]
        self.device = device or torch.device("cpu")
        self.mask_dev = upload(torch.tensor(self.mask, dtype=torch.long).reshape(len(lens), width), self.device)
        if ref is None:  # nothing cached yet: the first forward starts the cache
            self.cache = cache_from_tensors([], config)
            return
        kv = []
        for layer_idx, layer in enumerate(ref.layers):
            shape = (len(lens), layer.keys.shape[1], width, layer.keys.shape[3])
            keys = layer.keys.new_zeros(shape)
            values = layer.values.new_zeros(shape[:3] + (layer.values.shape[3],))
            sources = {}
            for b, (i, n) in enumerate(zip(self.rows, lens)):
                if n:
                    src = states[i].cache.layers[layer_idx]
                    keys[b, :, width - n :] = src.keys[0]
                    values[b, :, width - n :] = src.values[0]
                    sources[id(src)] = src
            for src in sources.values():  # fresh episodes may share one prefix cache: free after all rows
                src.keys, src.values = _emptied(src.keys), _emptied(src.values)
            kv.append((keys, values))
        self.cache = cache_from_tensors(kv, config)

    def forward(self, model: Any, new: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
        """Feed `new[b]` (≥ 1 token each, ragged: left-padded within the block) to every row;
        returns the next-token logits (B, V) in fp32, on the model's device. One upload."""
        width = max(len(n) for n in new)
        block = [[0] * (width - len(n)) + [1] * len(n) for n in new]
        ids = [[pad_id] * (width - len(n)) + list(n) for n in new]
        # positions: 0, 1, … over each row's real tokens after its `pos`; padding repeats the first
        positions = [[p + max(j - (width - len(n)), 0) for j in range(width)] for p, n in zip(self.pos, new)]
        packed = upload(torch.tensor([ids, block, positions], dtype=torch.long), self.device)
        self.mask_dev = torch.cat([self.mask_dev, packed[1]], dim=1)
        out = model(
            input_ids=packed[0],
            attention_mask=self.mask_dev,
            position_ids=packed[2],
            cache=self.cache,
            use_cache=True,
            logits_to_keep=1,
        )
        self.cache = out.cache if getattr(out, "cache", None) is not None else self.cache
        for row, blk, n in zip(self.mask, block, new):
            row.extend(blk)
        self.pos = [p + len(n) for p, n in zip(self.pos, new)]
        return out.logits[:, -1].float()

    def extract(self, b: int) -> Any:
        """Row `b`'s cache without its padding: a fresh (1, H, n, D) DynamicCache."""
        cols = [j for j, v in enumerate(self.mask[b]) if v]
        contiguous = bool(cols) and cols[-1] - cols[0] + 1 == len(cols)
        idx = None if contiguous else upload(torch.tensor(cols, dtype=torch.long), self.device)
        kv = []
        for layer in self.cache.layers:
            if contiguous:
                s = slice(cols[0], cols[-1] + 1)
                kv.append((layer.keys[b : b + 1, :, s].clone(), layer.values[b : b + 1, :, s].clone()))
            else:
                kv.append((layer.keys[b : b + 1].index_select(2, idx), layer.values[b : b + 1].index_select(2, idx)))
        return cache_from_tensors(kv, self.config)

    def keep(self, keep_rows: Sequence[int]) -> None:
        """Drop every row not in `keep_rows` (batch positions), and columns now padding in all rows."""
        keep_rows = list(keep_rows)
        self.mask = [self.mask[b] for b in keep_rows]
        self.pos = [self.pos[b] for b in keep_rows]
        self.rows = [self.rows[b] for b in keep_rows]
        width = len(self.mask[0]) if self.mask else 0
        start = min((row.index(1) for row in self.mask if 1 in row), default=width)
        self.mask = [row[start:] for row in self.mask]
        idx = upload(torch.tensor(keep_rows, dtype=torch.long), self.device)
        self.mask_dev = self.mask_dev[idx, start:]
        for layer in self.cache.layers:
            layer.keys = layer.keys[idx, :, start:]
            layer.values = layer.values[idx, :, start:]
