"""xpress_ext: custom ops for XPress speculative drafting and Inkling short convolution.

Importing the package loads the compiled library (``xpress_ext._C``), which registers the
ops under ``torch.ops.xpress_ext``; ``xpress_ext.ops`` holds typed wrappers and the fake
kernels ``torch.compile`` traces with.
"""

import torch  # noqa: F401  (loads libtorch before the extension that links against it)

from . import _C  # noqa: F401  (runs the TORCH_LIBRARY registrations)
from . import ops
from . import sconv as _sconv_module  # noqa: F401  (xpress_ext.sconv, the seed-002 drop-in)
from .head import HYBRID_KEY_MAP, CheckpointError, XPressRefinerHead
from .ops import (
    add_argmax_to_blk,
    gather_gemv,
    gather_gemv_argmax_to_blk,
    gather_rows,
    hidden_mean_concat,
    latent_embed_table,
    latent_pack_weights,
    latent_pass,
    readout_argmax_to_blk,
    topc_argmax_to_blk,
    topc_select,
)


def has_cuda_kernels() -> bool:
    """True when the library was built with its CUDA kernels (independent of any GPU)."""
    return torch._C._dispatch_has_kernel_for_dispatch_key("xpress_ext::latent_pass", "CUDA")


__all__ = [
    "XPressRefinerHead",
    "HYBRID_KEY_MAP",
    "CheckpointError",
    "ops",
    "latent_pass",
    "latent_embed_table",
    "latent_pack_weights",
    "add_argmax_to_blk",
    "readout_argmax_to_blk",
    "topc_argmax_to_blk",
    "topc_select",
    "gather_rows",
    "gather_gemv",
    "gather_gemv_argmax_to_blk",
    "hidden_mean_concat",
    "has_cuda_kernels",
]
