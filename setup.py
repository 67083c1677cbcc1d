# Build of xpress_ext._C: one abi3 shared object (py_limited_api, no pybind11) holding the
# CPU implementations and, when a CUDA toolkit and a CUDA build of torch are present, the
# CUDA kernels.  Whether CUDA is built is decided by the toolkit, never by
# torch.cuda.is_available(): the build machine usually has no GPU.
#
# Environment:
#   XPRESS_EXT_CPU_ONLY=1     build the CPU implementations only
#   TORCH_CUDA_ARCH_LIST      CUDA targets (default "9.0a", the H100/H200 with their warpgroup
#                             MMA and TMA: the many-row readout kernel needs it; a list without
#                             9.0a builds everything else and takes the GEMM + add_argmax path)
#   MAX_JOBS                  parallel compile jobs (torch's ninja backend)
#   XPRESS_EXT_DEBUG=1        host code built -O0 -g (the CUDA kernels stay -O3)
import glob
import os

from setuptools import find_packages, setup

import torch
from torch.utils.cpp_extension import (
    CUDA_HOME,
    BuildExtension,
    CppExtension,
    CUDAExtension,
)

ROOT = os.path.dirname(os.path.abspath(__file__))


def _want_cuda() -> bool:
    if os.environ.get("XPRESS_EXT_CPU_ONLY", "0") not in ("", "0"):
        return False
    return torch.version.cuda is not None and CUDA_HOME is not None


def _write_build_config(cuda: bool, wgmma: bool) -> None:
    """xpress_ext/_build_config.py: what this build holds, for the tests (not tracked)."""
    with open(os.path.join(ROOT, "xpress_ext", "_build_config.py"), "w") as f:
        f.write("# Written by setup.py for the build in this tree (not tracked).\n")
        f.write(f"CUDA = {cuda}\n")
        f.write(f"WGMMA = {wgmma}  # whether readout_argmax_to_blk's many-row kernel (sm_90a) is built\n")


def _extension():
    debug = os.environ.get("XPRESS_EXT_DEBUG", "0") not in ("", "0")
    opt = ["-O0", "-g"] if debug else ["-O3"]
    rel = lambda pattern: sorted(  # noqa: E731 - setuptools wants paths relative to setup.py
        os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, pattern))
    )
    sources = rel("csrc/*.cpp") + rel("csrc/cpu/*.cpp")
    cxx = opt + ["-std=c++17"]
    if not _want_cuda():
        _write_build_config(False, False)
        return CppExtension(
            "xpress_ext._C",
            sources,
            extra_compile_args={"cxx": cxx},
            py_limited_api=True,
        )
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0a")
    archs = os.environ["TORCH_CUDA_ARCH_LIST"].replace(";", " ").split()
    wgmma = ["-DXPRESS_EXT_WGMMA=1"] if any(a.startswith("9.0a") for a in archs) else []
    _write_build_config(True, bool(wgmma))
    nvcc = wgmma + [
        "-O3",
        "-std=c++17",
        "-lineinfo",
        "--expt-relaxed-constexpr",
        # keep the kernels IEEE-exact: argmax rounding and silu must match torch
        "-Xptxas=-warn-spills",
    ]
    return CUDAExtension(
        "xpress_ext._C",
        sources + rel("csrc/cuda/*.cu"),
        define_macros=[("XPRESS_EXT_WITH_CUDA", "1")],
        extra_compile_args={"cxx": cxx, "nvcc": nvcc},
        py_limited_api=True,
    )


setup(
    name="xpress_ext",
    version="0.1.0",
    description="CUDA/C++ custom ops for XPress speculative drafting and Inkling short convolution",
    packages=find_packages(include=["xpress_ext", "xpress_ext.*"]),
    ext_modules=[_extension()],
    install_requires=["torch==2.11.0"],
    python_requires=">=3.9",
    cmdclass={"build_ext": BuildExtension},
    options={"bdist_wheel": {"py_limited_api": "cp39"}},
)
