"""Drop-in for seed 002's Inkling short-convolution module.

``fused_sconv`` and ``sconv_seq_metadata`` keep the seed's names, signatures and ValueErrors;
both run as one launch of this package's ops (``torch.ops.xpress_ext.sconv`` /
``sconv_seq_metadata``), addressing the paged cache by (slot, absolute position), allocating
nothing but the output, so the same path replays under eager, piecewise and full CUDA graphs.
"""

from __future__ import annotations

import torch

from . import ops

__all__ = ["fused_sconv", "sconv_seq_metadata"]


def fused_sconv(
    x: torch.Tensor,  # [T, H*ws] head-major current-token inputs
    weight: torch.Tensor,  # [H*ws, W]
    cache: torch.Tensor,  # [num_blocks, H, N, D] paged
    positions: torch.Tensor,  # [T] int64 absolute position per token
    block_table: torch.Tensor,  # [num_reqs, max_blocks] int32
    seq_idx: torch.Tensor,  # [T] int32 token -> batch request
    slot_mapping: torch.Tensor,  # [T] int64 flat slot (PAD = -1 => skip)
    query_start: torch.Tensor,  # [T] int32 first x-row of the token's request
    off_s: int,
    ws: int,
    block_size: int,
    activation: str | None = None,
    use_residual: bool = True,
) -> torch.Tensor:
    """Single-launch insert + depthwise causal conv1d over the paged cache.

    Reads same-forward taps from ``x`` and pre-forward taps from the cache, so it is race-free
    in one launch for prefill / decode / spec and graph-safe.
    """
    return ops.sconv(
        x, weight, cache, positions, block_table, seq_idx, slot_mapping, query_start, off_s, ws,
        block_size, activation, use_residual,
    )


def sconv_seq_metadata(
    query_start_loc: torch.Tensor,
    num_reqs: int,
    num_actual_tokens: int,
    seq_idx_out: torch.Tensor,
    query_start_out: torch.Tensor,
    num_padded_tokens: int | None = None,
) -> None:
    """Fill static per-token seq_idx / query_start buffers in one launch.

    Padded rows are filled with zero and must have ``slot_mapping == -1``.
    """
    ops.sconv_seq_metadata(
        query_start_loc, num_reqs, num_actual_tokens, seq_idx_out, query_start_out, num_padded_tokens
    )
