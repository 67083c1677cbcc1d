"""The build's link against libstdc++: an extension holding its own static copy segfaults on the
first error message it formats (seen on an H200 image whose /opt/gcc ships only libstdc++.a), so
setup.py refuses such a toolchain and the library in this tree must need the shared one."""

from __future__ import annotations

import importlib.util
import os
import shutil
import stat
import subprocess
import sys

import pytest
import xpress_ext

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ELF / GNU toolchains")


def _setup_module():
    spec = importlib.util.spec_from_file_location("xpress_ext_setup", os.path.join(ROOT, "setup.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # not __main__: defines the helpers, runs no build
    return module


def _fake_compiler(tmp_path, name, answer):
    """A stand-in compiler that answers -print-file-name=libstdc++.so with `answer`."""
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\necho '{answer}'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@linux_only
def test_setup_refuses_a_toolchain_without_shared_libstdcxx(tmp_path):
    check = _setup_module().check_shared_libstdcxx
    static_only = _fake_compiler(tmp_path, "g++-static", "libstdc++.so")  # gcc's "not found"
    shared = _fake_compiler(tmp_path, "g++-shared", "/usr/lib/gcc/x86_64-linux-gnu/13/libstdc++.so")
    with pytest.raises(RuntimeError, match="g\\+\\+-static.*CXX=g\\+\\+"):
        check([shared, static_only])
    check([shared, shared])  # answers a path: accepted
    check([_fake_compiler(tmp_path, "wrapper", "usage: wrapper [options] compiler")])  # can't tell
    check([str(tmp_path / "no-such-compiler")])  # cannot run: left to the build to report
    real = shutil.which("c++") or shutil.which("g++")
    if real is not None:
        check([real])  # this machine's compiler, which built the tree's library


@linux_only
def test_library_needs_the_shared_libstdcxx():
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("no readelf")
    lib = xpress_ext._C.__file__  # the library this process loaded
    dynamic = subprocess.run([readelf, "-d", lib], capture_output=True, text=True, check=True).stdout
    needed = [line.split("[", 1)[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line]
    assert any(n.startswith("libstdc++.so") for n in needed), (lib, needed)
