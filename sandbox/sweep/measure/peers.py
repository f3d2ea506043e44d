"""Sweep-internal peers: outside implementations raced beside the registry, never part of it.

``torch.sdpa``: PyTorch's scaled_dot_product_attention over contiguous K/V (what a framework does
without paging). It joins a GPU sweep only when torch is importable and sees a GPU; the sandbox
never requires PyTorch. It has no block table, so it is measured once per shape (block_size empty).
"""
from __future__ import annotations

import importlib.util

import numpy as np

from reference import gather_tokens

from ...variant.limits import Limits


def torch_available() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    try:
        import torch
        return bool(torch.cuda.is_available())
    except Exception:
        return False


class _TorchPrepared:
    def __init__(self, problem, sdpa, q, k, v, mask, scale, gqa):
        self.problem, self._sdpa, self._args = problem, sdpa, (q, k, v)
        self._kwargs = dict(attn_mask=mask, scale=scale)
        if gqa:
            self._kwargs["enable_gqa"] = True
        self.out = None

    def launch(self) -> None:
        self.out = self._sdpa(*self._args, **self._kwargs)

    def result(self) -> np.ndarray:
        return self.out.squeeze(2).cpu().numpy().astype(self.problem.dtype)


class TorchSdpa:
    """torch.nn.functional.scaled_dot_product_attention, q [B, H, 1, D] over contiguous K/V [B, Hkv, T, D]."""

    name = "torch.sdpa"
    family = "torch"
    limits = Limits(block_sizes=None, head_dims=None, backends=("gpu",))
    summary = "PyTorch SDPA over contiguous K/V (no paging): an outside reference point"

    def __init__(self):
        self.note = ""

    def prepare(self, problem, backend: str) -> _TorchPrepared:
        import torch
        import torch.nn.functional as F

        if backend != "gpu":
            raise ValueError("torch.sdpa runs on the GPU only")
        p = problem
        lens = p.context_lens.astype(int)
        longest = int(lens.max())
        shape = (p.num_seqs, longest, p.num_kv_heads, p.head_dim)
        keys, values = np.zeros(shape, dtype=p.dtype), np.zeros(shape, dtype=p.dtype)
        for s, n in enumerate(lens):
            keys[s, :n] = gather_tokens(p.key_cache, p.block_tables[s], n)
            values[s, :n] = gather_tokens(p.value_cache, p.block_tables[s], n)
        device = torch.device("cuda")
        q = torch.from_numpy(p.query).to(device).unsqueeze(2)                      # [B, H, 1, D]
        k = torch.from_numpy(keys).to(device).permute(0, 2, 1, 3).contiguous()     # [B, Hkv, T, D]
        v = torch.from_numpy(values).to(device).permute(0, 2, 1, 3).contiguous()
        mask = None
        if (lens != longest).any():
            mask = torch.from_numpy(np.arange(longest)[None, :] < lens[:, None]).to(device)[:, None, None, :]
        group = p.num_heads // p.num_kv_heads
        gqa = group > 1
        self.note = "contiguous K/V, no block table; block size does not apply"
        if gqa:
            try:  # enable_gqa reads each KV head once (torch >= 2.5)
                F.scaled_dot_product_attention(q[:1], k[:1], v[:1], enable_gqa=True,
                                               attn_mask=None if mask is None else mask[:1])
            except TypeError:
                k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
                gqa = False
                self.note += f"; torch < 2.5: K/V repeated {group}x for GQA (reads more bytes than counted)"
        torch.cuda.synchronize()
        return _TorchPrepared(p, F.scaled_dot_product_attention, q, k, v, mask, p.softmax_scale, gqa)


def peers(on_gpu: bool, enabled: bool = True) -> list:
    """The peers that join this sweep: torch.sdpa on a GPU where torch is importable."""
    return [TorchSdpa()] if enabled and on_gpu and torch_available() else []
