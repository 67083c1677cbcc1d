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
#   CC, CXX                   host compilers (CC is also nvcc's -ccbin); they must link the
#                             shared libstdc++ (check_shared_libstdcxx below)
import glob
import os
import subprocess
import sys

from setuptools import find_packages, setup

import torch
from torch.utils.cpp_extension import (
    CUDA_HOME,
    BuildExtension,
    CppExtension,
    CUDAExtension,
)

ROOT = os.path.dirname(os.path.abspath(__file__))


def check_shared_libstdcxx(compilers) -> None:
    """Refuse a toolchain that can only link libstdc++ statically.

    torch's libraries use the process's shared libstdc++.  An extension holding its own static
    copy (a toolchain that ships only libstdc++.a) loads and computes, but its first error
    message crashes: the two copies' iostream locales do not mix (seen with an H200 image's
    /opt/gcc, where every `TORCH_CHECK` that formatted a number segfaulted).  gcc and clang answer
    `-print-file-name=` with the bare name when they find no such file.
    """
    if not sys.platform.startswith("linux"):
        return
    for cc in dict.fromkeys(compilers):
        try:
            found = subprocess.run([cc, "-print-file-name=libstdc++.so"], capture_output=True,
                                   text=True, timeout=60).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            continue  # a compiler that cannot run fails the build with its own message
        if found == "libstdc++.so":  # anything else (a path, a wrapper's answer) is let through
            raise RuntimeError(
                f"xpress_ext: the compiler {cc} finds no shared libstdc++ (libstdc++.so), so it "
                "would link a static copy into the extension, and that copy crashes beside "
                "torch's shared one. Build with a compiler that has the shared library, e.g. "
                "the system GCC: CC=gcc CXX=g++ (CC also picks nvcc's host compiler).")


class _BuildExt(BuildExtension):
    def build_extensions(self):
        cc = self.compiler
        programs = [getattr(cc, attr)[0] for attr in ("compiler_so", "compiler_cxx", "linker_so")
                    if getattr(cc, attr, None)]
        check_shared_libstdcxx(programs)
        super().build_extensions()


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


if __name__ == "__main__":  # as setuptools runs it; tests import check_shared_libstdcxx
    setup(
        name="xpress_ext",
        version="0.1.0",
        description="CUDA/C++ custom ops for XPress speculative drafting and Inkling short convolution",
        packages=find_packages(include=["xpress_ext", "xpress_ext.*"]),
        ext_modules=[_extension()],
        install_requires=["torch==2.11.0"],
        python_requires=">=3.9",
        cmdclass={"build_ext": _BuildExt},
        options={"bdist_wheel": {"py_limited_api": "cp39"}},
    )
