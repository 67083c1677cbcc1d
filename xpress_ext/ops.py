"""Typed wrappers over ``torch.ops.xpress_ext`` and the fake kernels ``torch.compile`` uses.

The wrappers call the ``.default`` overloads directly: no Python dispatch layer on the hot
path.  Shapes, dtypes and errors are specified in ``shared/SPEC.md``; every op that writes
into caller buffers returns ``None``.
"""

from __future__ import annotations

import torch

_ops = torch.ops.xpress_ext


def latent_pass(
    blk: torch.Tensor,
    tok_am1: torch.Tensor,
    xh: torch.Tensor,
    lat_out: torch.Tensor,
    w1: torch.Tensor,
    wlat_t: torch.Tensor,
    mix_kjc: torch.Tensor,
    wg_t: torch.Tensor,
    wu_t: torch.Tensor,
    wd_t: torch.Tensor,
    do_mlp: bool = True,
) -> None:
    """Latent stage of one Jacobi pass; writes ``lat_out[n, b-1, :]`` for slots b >= 1."""
    _ops.latent_pass.default(blk, tok_am1, xh, lat_out, w1, wlat_t, mix_kjc, wg_t, wu_t, wd_t, do_mlp)


def add_argmax_to_blk(base: torch.Tensor, bias: torch.Tensor, blk: torch.Tensor) -> None:
    """``blk[n, 1 + b] = argmax_v dtype(base[r, v] + bias[r, v])``, r = n * (B - 1) + b."""
    _ops.add_argmax_to_blk.default(base, bias, blk)


def topc_argmax_to_blk(
    base_c: torch.Tensor, bias_c: torch.Tensor, cand: torch.Tensor, blk: torch.Tensor
) -> None:
    """``blk[n, j + 1] = cand[n, j, argmax_c dtype(base_c + bias_c)]``."""
    _ops.topc_argmax_to_blk.default(base_c, bias_c, cand, blk)


# Fake kernels: these ops only write into caller buffers, so tracing needs no output.
@torch.library.register_fake("xpress_ext::latent_pass")
def _latent_pass_fake(blk, tok_am1, xh, lat_out, w1, wlat_t, mix_kjc, wg_t, wu_t, wd_t, do_mlp=True):
    return None


@torch.library.register_fake("xpress_ext::add_argmax_to_blk")
def _add_argmax_fake(base, bias, blk):
    return None


@torch.library.register_fake("xpress_ext::topc_argmax_to_blk")
def _topc_argmax_fake(base_c, bias_c, cand, blk):
    return None
