"""Tensor-parallel sharding of a model: the per-card share a card computes with.

Megatron-style tensor parallelism over ``cards`` identical cards: column-parallel then
row-parallel linears, so each card holds a share of the heads, FFN columns, experts'
columns, Mamba channels and vocabulary, and the full ``hidden`` width; two all-reduces per
layer join the partial sums (priced by the iteration-time evaluators).
"""
from __future__ import annotations

import dataclasses

from dram_models.errors import ConfigError

__all__ = ["shard_model"]


def shard_model(model, cards: int):
    """The per-card share of ``model`` under tensor parallelism over ``cards`` cards: 1/cards
    of the query heads, KV heads (replicated if fewer KV heads than cards), FFN columns and
    vocabulary (LM head); ``hidden`` stays (column- then row-parallel linears). MoE: every
    expert's (and the shared experts') inner columns are split the same way (each card
    holds 1/cards of every expert, the router is replicated: vLLM's fused-MoE tensor
    parallelism). Mamba: 1/cards of the inner channels (in_proj and conv column-parallel,
    x_proj and out_proj row-parallel, each card scanning its channels with its share of
    the state); the dt/B/C projection's partial sums are not all-reduced (assumed: the
    (dt_rank + 2 d_state)-wide reduction is small beside the two per layer)."""
    cards = int(cards)
    if cards < 1:
        raise ConfigError("cards", f"must be >= 1, got {cards}")
    if cards == 1:
        return model
    h, kvh, ffn = int(model.heads), int(model.kv_heads), int(model.ffn_dim)
    if h % cards or ffn % cards:
        raise ConfigError("cards", f"{model.name}: heads ({h}) and ffn_dim ({ffn}) must be "
                          f"divisible by cards ({cards}) for tensor parallelism")
    if kvh % cards and cards % kvh:
        raise ConfigError("cards", f"{model.name}: kv_heads ({kvh}) and cards ({cards}) must "
                          "divide one another")
    kv_card = max(1, kvh // cards)
    extra = {}
    if model.moe_experts:
        for f in ("moe_ffn_dim", "moe_shared_ffn_dim"):
            if getattr(model, f) % cards:
                raise ConfigError("cards", f"{model.name}: {f} ({getattr(model, f)}) must be "
                                  f"divisible by cards ({cards}) for tensor parallelism")
            extra[f] = getattr(model, f) // cards
    if model.ssm_d_state:
        if model.ssm_d_inner % (cards * kv_card):
            raise ConfigError("cards", f"{model.name}: Mamba inner width {model.ssm_d_inner} "
                              f"must split into cards x kv heads per card ({cards} x {kv_card})")
        extra["ssm_inner_dim"] = model.ssm_d_inner // cards
    return dataclasses.replace(
        model, name=f"{model.name}/tp{cards}", heads=h // cards, kv_heads=kv_card,
        ffn_dim=ffn // cards, vocab=-(-int(model.vocab) // cards), head_dim=model.head_dim,
        decoupled_head_dim=True, **extra)
