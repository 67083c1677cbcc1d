"""The sanitizer canary: a kernel that writes 256 floats past the end of a 1024-float tensor.
Run under `compute-sanitizer --tool memcheck` with PYTORCH_NO_CUDA_MEMORY_CACHING=1, it must be
reported ("Invalid __global__ write"); scripts/sanitize.sh fails when it is not."""

import torch
import triton
import triton.language as tl


@triton.jit
def _write_past_end(ptr, n):
    offs = n + tl.arange(0, 256)
    tl.store(ptr + offs, 1.0)  # no mask: every store is out of bounds


x = torch.zeros(1024, device="cuda")
_write_past_end[(1,)](x, x.numel())
torch.cuda.synchronize()
print("canary kernel ran")
