"""Drop-in for ``vllm.v1.worker.gpu.spec_decode.xpress.kernels`` (seed 000).

Same function names and signatures as vLLM's Triton module, so a call site does not change:
Triton tuning knobs (``kc``, ``rc``, ``ht``, ``num_stages``, ``block_v``) are accepted and
ignored, and the scratch buffers ``out_val`` / ``out_idx`` are accepted and left unused (the
fused argmax reduces in one launch without global scratch).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import ops

__all__ = ["xpress_latent_pass", "fused_add_argmax_to_blk", "fused_topc_argmax_to_blk"]


def xpress_latent_pass(
    blk: torch.Tensor,
    tok_am1: torch.Tensor,
    xh: torch.Tensor,
    lat_out: torch.Tensor,
    w1_weight: torch.Tensor,
    wlat_t: torch.Tensor,
    mix_kjc: torch.Tensor,
    wg_t: torch.Tensor,
    wu_t: torch.Tensor,
    wd_t: torch.Tensor,
    wgu_t: torch.Tensor | None = None,
    do_mlp: bool | None = None,
    kc: int | None = None,
    rc: int | None = None,
    ht: int = 64,
    num_stages: int | None = None,
) -> None:
    """Latent stage of one Jacobi pass over N blocks, written into ``lat_out``.

    ``do_mlp`` (default: True here) runs the SwiGLU MLP inside the fused kernel; False stops
    the kernel after the mixer and runs the MLP as GEMMs on ``wgu_t`` ([R, 2H], ``wg_t`` and
    ``wu_t`` side by side; built from them when None), as the seed does.
    """
    fused = True if do_mlp is None else bool(do_mlp)
    ops.latent_pass(blk, tok_am1, xh, lat_out, w1_weight, wlat_t, mix_kjc, wg_t, wu_t, wd_t, fused)
    if fused:
        return
    hidden = wg_t.shape[1]
    u = lat_out.reshape(-1, lat_out.shape[-1])
    if wgu_t is not None:
        g, v = torch.mm(u, wgu_t).split(hidden, dim=-1)
    else:
        g, v = torch.mm(u, wg_t), torch.mm(u, wu_t)
    lat_out.add_(torch.mm(F.silu(g) * v, wd_t).view_as(lat_out))


def fused_add_argmax_to_blk(
    base: torch.Tensor,
    bias: torch.Tensor,
    out_val: torch.Tensor | None,
    out_idx: torch.Tensor | None,
    blk: torch.Tensor,
    block_v: int = 4096,
) -> None:
    """``blk[n, 1 + b] = argmax_v(base[r, v] + bias[r, v])`` for row r = n * (B-1) + b.

    ``base`` / ``bias`` may be [N * (B-1), V] or [N, B-1, V] views (e.g. ``base_full[:, 1:]``),
    read in place.  ``out_val``, ``out_idx`` and ``block_v`` are accepted for compatibility.
    """
    ops.add_argmax_to_blk(base, bias, blk)


def fused_topc_argmax_to_blk(
    base_c: torch.Tensor, bias_c: torch.Tensor, cand: torch.Tensor, blk: torch.Tensor
) -> None:
    """``blk[n, j + 1] = cand[n, j, argmax_c(base_c + bias_c)]`` in one launch.

    Accepts [N * (B-1), C] (the seed's documented layout) or [N, B-1, C] operands.
    """
    n, b = blk.shape
    as3d = lambda t: t.view(n, b - 1, t.shape[-1]) if t.dim() == 2 else t  # noqa: E731
    ops.topc_argmax_to_blk(as3d(base_c), as3d(bias_c), as3d(cand), blk)
