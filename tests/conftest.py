"""Test-run options shared by every file.

XPRESS_EXT_SHARD=i/k keeps every k-th selected test starting at the i-th (0-based) and
deselects the rest, so one slow file can be spread over k processes (scripts/sanitize.sh does
this under compute-sanitizer, where a file can take many minutes).  It runs after -k / -m, so
the k shards of one selection are disjoint and together are that selection."""

import os

import pytest


def _shard():
    spec = os.environ.get("XPRESS_EXT_SHARD", "")
    if not spec:
        return None
    try:
        i, k = (int(x) for x in spec.split("/"))
    except ValueError:
        raise pytest.UsageError(f"XPRESS_EXT_SHARD must be 'i/k', got {spec!r}") from None
    if k < 1 or not 0 <= i < k:
        raise pytest.UsageError(f"XPRESS_EXT_SHARD must be 'i/k' with 0 <= i < k, got {spec!r}")
    return i, k


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    shard = _shard()
    if shard is None:
        return
    i, k = shard
    keep = [item for n, item in enumerate(items) if n % k == i]
    drop = [item for n, item in enumerate(items) if n % k != i]
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep


def pytest_configure(config):
    if os.environ.get("XPRESS_EXT_FP32_MATMUL") == "1":
        from xpress_testing import Fp32Matmul

        config._xpress_fp32_matmul = Fp32Matmul()
        config._xpress_fp32_matmul.__enter__()


def pytest_unconfigure(config):
    mode = getattr(config, "_xpress_fp32_matmul", None)
    if mode is not None:
        mode.__exit__(None, None, None)
