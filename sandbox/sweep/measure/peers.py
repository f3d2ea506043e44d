"""Sweep-internal peers: outside implementations raced beside the registry, never part of it.

``torch.sdpa``: PyTorch's scaled_dot_product_attention over contiguous K/V (what a framework does
without paging). It joins a GPU sweep only when torch is importable and sees a GPU; the sandbox
never requires PyTorch. It has no block table, so it is measured once per shape (block_size empty).

Registry peers (flashinfer.decode: another project's kernel compiled from its wheel's headers; a family declared
with `peer`, sandbox/variant/family.py) are raced like our variants; registry.labelled() marks them in the summary
and the plots ("peer: FlashInfer 0.7.4") and their wrong or failed points never decide the sweep's exit status
(run.is_peer).
"""
from __future__ import annotations

import importlib.util

import numpy as np

from kernels.flashinfer.dispatch import page_table
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


class _ApiPrepared:
    def __init__(self, problem, run, out_dtype):
        self.problem, self._run, self.out_dtype, self.out = problem, run, out_dtype, None

    def launch(self) -> None:
        self.out = self._run()

    def result(self) -> np.ndarray:
        import torch
        out = self.out
        if out.dtype == torch.bfloat16:
            return out.view(torch.int16).cpu().numpy().view(self.out_dtype)
        return out.cpu().numpy().astype(self.out_dtype)


def flashinfer_api_missing(on_gpu: bool) -> str | None:
    """Why FlashInfer cannot be timed through its own Python API here, or None."""
    if not on_gpu:
        return "no GPU"
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed (FlashInfer's Python API needs it; the sandbox does not install torch)"
    if not torch_available():
        return "torch sees no GPU"
    if importlib.util.find_spec("flashinfer") is None:
        return "flashinfer-python is not installed"
    return None


class FlashInferApi:
    """FlashInfer's BatchDecodeWithPagedKVCacheWrapper (plan, then run) on torch tensors: FlashInfer as its
    users call it, JIT-compiled by FlashInfer itself, beside flashinfer.decode (the same kernel built here)."""

    name = "flashinfer.api"
    family = "torch"      # torch tensors, timed with torch's CUDA events
    per_shape = False     # paged: one point per block size
    limits = Limits(block_sizes=None, head_dims=(64, 128, 256), dtypes=("float16", "bfloat16"), backends=("gpu",),
                    options=("softcap",))
    summary = "FlashInfer through its own Python API (BatchDecodeWithPagedKVCacheWrapper)"

    def __init__(self):
        self.note = "FlashInfer's Python API (its own JIT build and planner)"

    def prepare(self, problem, backend: str) -> _ApiPrepared:
        import flashinfer
        import torch

        if backend != "gpu":
            raise ValueError("flashinfer.api runs on the GPU only")
        p = problem
        dtype = torch.bfloat16 if np.dtype(p.dtype).name == "bfloat16" else torch.float16
        device = torch.device("cuda")

        def tensor(a):
            if a.dtype.name == "bfloat16":
                return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16).to(device)
            return torch.from_numpy(np.ascontiguousarray(a)).to(device)

        indptr, indices, last = (torch.from_numpy(a).to(device)
                                 for a in page_table(p.block_tables, p.context_lens, p.block_size))
        wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            torch.zeros(128 * 1024 * 1024, dtype=torch.uint8, device=device), "NHD")
        cap = float(p.options.logits_soft_cap) or None
        wrapper.plan(indptr, indices, last, p.num_heads, p.num_kv_heads, p.head_dim, p.block_size,
                     q_data_type=dtype, kv_data_type=dtype, sm_scale=float(p.softmax_scale), logits_soft_cap=cap)
        q, k, v = tensor(p.query), tensor(p.key_cache), tensor(p.value_cache)
        torch.cuda.synchronize()
        return _ApiPrepared(p, lambda: wrapper.run(q, (k, v)), p.dtype)


def peers(on_gpu: bool, enabled: bool = True) -> list:
    """The peers that join this sweep: torch.sdpa on a GPU where torch is importable; FlashInfer's Python API
    where flashinfer-python is importable too (unavailable(): why one is missing)."""
    if not (enabled and on_gpu and torch_available()):
        return []
    return [TorchSdpa()] + ([FlashInferApi()] if flashinfer_api_missing(on_gpu) is None else [])


def unavailable(on_gpu: bool, enabled: bool = True) -> list[str]:
    """One line per outside peer that does not join this sweep, with the reason."""
    if not enabled:
        return []
    missing = flashinfer_api_missing(on_gpu)
    return [f"flashinfer.api (FlashInfer through its own Python API) not raced: {missing}"] if missing else []
