"""A nanoGPT-style GPT (pre-LayerNorm transformer, GELU MLP, causal attention), GPT-2's layout.

GPT-2's initialisation (normal std 0.02, residual projections scaled by ``1/sqrt(2 n_layer)``).
``tie_embeddings=True`` (GPT-2 small, ``gpt2-small``) makes the output head the token embedding's
transpose, as GPT-2 and nanoGPT do; the quick char model keeps them untied. Cut into pipeline
stages (:func:`split_stages`), a tied model has one copy of the shared matrix on the first stage
(embedding) and one on the last (head); the training loop sums their gradients between those two
stages every step (traffic class ``tied_grads``), so the copies stay equal, as in Megatron-LM.
:func:`padded_vocab` rounds a vocabulary up as nanoGPT does (GPT-2's 50257 -> 50304).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["GPTConfig", "GPT", "Block", "split_stages", "StageFirst", "StageMiddle", "StageLast", "padded_vocab",
           "GPT2_VOCAB", "count_params"]

#: GPT-2's BPE vocabulary (``tiktoken`` ``gpt2`` / ``r50k_base``)
GPT2_VOCAB = 50257


def padded_vocab(vocab: int, multiple: int = 64) -> int:
    """``vocab`` rounded up to a multiple of ``multiple`` (nanoGPT: 50257 -> 50304, for fast matmuls)."""
    if vocab < 1 or multiple < 1:
        raise ValueError(f"padded_vocab: vocab and multiple must be >= 1, got {vocab}, {multiple}")
    return -(-int(vocab) // int(multiple)) * int(multiple)


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 65
    block_size: int = 64
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    tie_embeddings: bool = False

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"GPTConfig.{name} must be >= 1, got {getattr(self, name)!r}")
        if self.n_embd % self.n_head:
            raise ValueError(f"GPTConfig.n_embd ({self.n_embd}) must be a multiple of n_head ({self.n_head})")


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = nn.Sequential(nn.Linear(cfg.n_embd, 4 * cfg.n_embd), nn.GELU(),
                                 nn.Linear(4 * cfg.n_embd, cfg.n_embd))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """``GPT(cfg)(idx) -> logits [B, T, vocab]``."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.apply(self._init)
        if cfg.tie_embeddings:  # GPT-2: one matrix for input embedding and output head
            self.lm_head.weight = self.wte.weight
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, 0.0, 0.02)

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        if t > self.cfg.block_size:
            raise ValueError(f"sequence length {t} > block_size {self.cfg.block_size}")
        return self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx)
        for blk in self.h:
            x = blk(x)
        return self.lm_head(self.ln_f(x))


class StageFirst(nn.Module):
    """Embeddings and the first blocks: token ids -> hidden states."""

    def __init__(self, gpt: GPT, blocks: list[nn.Module]) -> None:
        super().__init__()
        self.wte, self.wpe, self.block_size = gpt.wte, gpt.wpe, gpt.cfg.block_size
        self.h = nn.ModuleList(blocks)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.h:
            x = blk(x)
        return x


class StageMiddle(nn.Module):
    """Blocks only: hidden -> hidden."""

    def __init__(self, blocks: list[nn.Module]) -> None:
        super().__init__()
        self.h = nn.ModuleList(blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for blk in self.h:
            x = blk(x)
        return x


class StageLast(nn.Module):
    """Last blocks, final LayerNorm and head: hidden -> logits."""

    def __init__(self, gpt: GPT, blocks: list[nn.Module]) -> None:
        super().__init__()
        self.h = nn.ModuleList(blocks)
        self.ln_f, self.lm_head = gpt.ln_f, gpt.lm_head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for blk in self.h:
            x = blk(x)
        return self.lm_head(self.ln_f(x))


def count_params(gpt: nn.Module) -> int:
    """Distinct parameters (a tied matrix counted once, as GPT-2's 124 M)."""
    return sum(p.numel() for p in gpt.parameters())


def split_stages(gpt: GPT, n_stages: int) -> list[nn.Module]:
    """Cut ``gpt`` into ``n_stages`` consecutive stages sharing its parameters (blocks split evenly).

    With tied embeddings the first stage's ``wte.weight`` and the last stage's ``lm_head.weight``
    are the same tensor here; each pipeline rank keeps only its own stage, so each holds a copy.
    """
    if n_stages < 2:
        raise ValueError(f"a pipeline needs >= 2 stages, got {n_stages}")
    n = len(gpt.h)
    if n < n_stages:
        raise ValueError(f"cannot split {n} blocks into {n_stages} stages")
    cuts = [round(i * n / n_stages) for i in range(n_stages + 1)]
    groups = [list(gpt.h[cuts[i]:cuts[i + 1]]) for i in range(n_stages)]
    stages: list[nn.Module] = [StageFirst(gpt, groups[0])]
    stages += [StageMiddle(g) for g in groups[1:-1]]
    stages.append(StageLast(gpt, groups[-1]))
    return stages
