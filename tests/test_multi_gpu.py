"""Several GPUs (docs/RELIABILITY.md): every op with all its tensors on cuda:1 while the current
device is cuda:0, eagerly and inside a captured graph; two graphs on two devices replayed
alternately with no cross-device writes.  Skipped with fewer than two GPUs."""

import pytest
import torch
from sconv_testing import make_batch, page_view
from xpress_testing import assert_latent_close, latent_args, latent_inputs

import xpress_ext
from xpress_ext import reference as ref

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")]


def op_calls(dev):
    """(run, check) pairs: run() launches one op on `dev`; check() compares with the CPU reference
    of the op's inputs as they are when check() runs.  Also returns refresh(), which rewrites the
    inputs of the first four ops in place (new xh, logits and bias), so a replayed graph that
    did not capture them fails its checks."""
    calls = []
    inp = latent_inputs(3, 16, 64, 128, 999, torch.bfloat16, dev, seed=1)
    lat = torch.empty(3, 15, 64, dtype=torch.bfloat16, device=dev)
    calls.append((lambda: xpress_ext.latent_pass(*latent_args(inp)[:3], lat, *latent_args(inp)[3:]),
                  lambda: _latent_close(lat, inp)))
    full = torch.randn(3, 16, 5000, device=dev).to(torch.bfloat16)
    bias = torch.randn(45, 5000, device=dev).to(torch.bfloat16)
    blk = torch.zeros(3, 16, dtype=torch.long, device=dev)
    calls.append((lambda: xpress_ext.add_argmax_to_blk(full[:, 1:, :], bias, blk),
                  lambda: torch.equal(blk.cpu(), ref.add_argmax_to_blk(full[:, 1:, :].cpu(), bias.cpu(), torch.zeros(3, 16, dtype=torch.long)))))
    values = torch.empty(3, 15, 64, dtype=torch.bfloat16, device=dev)
    ids = torch.empty(3, 15, 64, dtype=torch.long, device=dev)
    sblk = torch.zeros(3, 16, dtype=torch.long, device=dev)
    calls.append((lambda: xpress_ext.topc_select(full[:, 1:, :], 64, values, ids, sblk),
                  lambda: torch.equal(ids.cpu(), ref.topc_select(full[:, 1:, :].cpu(), 64)[1])))
    cblk = torch.zeros(3, 16, dtype=torch.long, device=dev)
    calls.append((lambda: xpress_ext.topc_argmax_to_blk(values, values, ids, cblk),
                  lambda: torch.equal(cblk.cpu(), ref.topc_argmax_to_blk(values.cpu(), values.cpu(), ids.cpu(), torch.zeros(3, 16, dtype=torch.long)))))
    table = torch.randn(5000, 64, device=dev).to(torch.bfloat16)
    lat = torch.randn(3, 15, 64, device=dev).to(torch.bfloat16)
    gblk = torch.zeros(3, 16, dtype=torch.long, device=dev)
    calls.append((lambda: xpress_ext.gather_gemv_argmax_to_blk(table, ids, lat, values, gblk),
                  lambda: torch.equal(gblk.cpu(), ref.topc_argmax_to_blk(
                      values.cpu(), ref.gather_gemv(table.cpu(), ids.cpu(), lat.cpu()), ids.cpu(),
                      torch.zeros(3, 16, dtype=torch.long)))))
    hid = torch.randn(3, 16, 96, device=dev).to(torch.bfloat16)
    hg = torch.empty(3, 16, 192, dtype=torch.bfloat16, device=dev)
    calls.append((lambda: xpress_ext.hidden_mean_concat(hid, hg),
                  lambda: torch.equal(hg.cpu(), ref.hidden_mean_concat(hid.cpu()))))
    b = make_batch([(5, 3), (0, 6), (11, 1)], W=4, block_size=8, device=dev, seed=2, pad=1)
    H, N, D = b.cache.shape[1:]
    before = b.cache_base.cpu()
    out = {}
    calls.append((lambda: out.__setitem__("y", xpress_ext.ops.sconv(*b.args(), "silu", True)),
                  lambda: torch.equal(b.cache_base.cpu(), _sconv_ref_cache(b, before, H, N, D))
                  and _sconv_out_close(out["y"], b, before, H, N, D)))
    qsl = torch.tensor([0, 3, 9, 10], dtype=torch.int32, device=dev)
    seq = torch.empty(12, dtype=torch.int32, device=dev)
    first = torch.empty(12, dtype=torch.int32, device=dev)
    calls.append((lambda: xpress_ext.ops.sconv_seq_metadata(qsl, 3, 10, seq, first, 12),
                  lambda: torch.equal(seq.cpu(), ref.sconv_seq_metadata(qsl.cpu(), 3, 10, 12)[0])))

    def refresh():
        inp["xh"].copy_(torch.randn(inp["xh"].shape, device=dev).to(inp["xh"].dtype))
        full.copy_(torch.randn(full.shape, device=dev).to(full.dtype))
        bias.copy_(torch.randn(bias.shape, device=dev).to(bias.dtype))
    return calls, refresh


def _latent_close(lat, inp):
    assert_latent_close(lat, inp)  # asserts the tolerance rule itself
    return True


def _sconv_out_close(y, b, before, H, N, D):
    """The tolerance rule of tests/sconv_testing.py: error vs float64 <= 2x torch's own."""
    args = [t.cpu() if torch.is_tensor(t) else t for t in b.args(cache=page_view(before.clone(), H, N, D))]
    exact = ref.sconv(*args, "silu", True, compute_dtype=torch.float64)[0]
    lowp = ref.sconv_lowp(*args, "silu", True)
    return ref.relative_error(y.cpu(), exact) <= 2 * ref.relative_error(lowp, exact)


def _sconv_ref_cache(b, before, H, N, D):
    args = [t.cpu() if torch.is_tensor(t) else t for t in b.args(cache=page_view(before.clone(), H, N, D))]
    _, cache = ref.sconv(*args, "silu", True)
    expect = before.clone()
    page_view(expect, H, N, D).copy_(cache)
    return expect


def test_every_op_on_cuda1_eager():
    torch.cuda.set_device(0)
    calls, _ = op_calls("cuda:1")
    for run, check in calls:
        run()
        torch.cuda.synchronize(1)
        assert check()
    assert torch.cuda.current_device() == 0


def test_every_op_on_cuda1_in_a_graph():
    torch.cuda.set_device(0)
    calls, refresh = op_calls("cuda:1")
    with torch.cuda.device(1):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for run, _ in calls:
                run()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        # An explicit capture stream of cuda:1: torch.cuda.graph's default one is made once per
        # process, on whichever device was current at its first use.
        with torch.cuda.graph(graph, stream=torch.cuda.Stream(device=1)):
            for run, _ in calls[:4]:  # the vocabulary and latent ops (sconv writes its cache once)
                run()
    for _ in range(2):
        refresh()
        graph.replay()
        torch.cuda.synchronize(1)
        for _, check in calls[:4]:
            assert check()
    assert torch.cuda.current_device() == 0


def test_two_devices_two_graphs_alternating():
    """A draft-like pair of ops captured on each device; replayed alternately with new inputs;
    each device's outputs equal its own eager result, and the other device's buffers unchanged."""
    graphs, bufs = [], []
    for d in (0, 1):
        with torch.cuda.device(d):
            full = torch.randn(2, 16, 7000, device=f"cuda:{d}").to(torch.bfloat16)
            values = torch.empty(2, 15, 32, dtype=torch.bfloat16, device=f"cuda:{d}")
            ids = torch.empty(2, 15, 32, dtype=torch.long, device=f"cuda:{d}")
            blk = torch.zeros(2, 16, dtype=torch.long, device=f"cuda:{d}")
            fn = lambda full=full, values=values, ids=ids, blk=blk: xpress_ext.topc_select(full[:, 1:, :], 32, values, ids, blk)  # noqa: E731
            fn()
            torch.cuda.synchronize(d)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=torch.cuda.Stream(device=d)):
                fn()
            graphs.append(g)
            bufs.append((full, values, ids, blk))
    for it in range(6):
        d = it % 2
        full, values, ids, blk = bufs[d]
        other = [t.clone() for t in bufs[1 - d]]
        full.copy_(torch.randn(full.shape, device=full.device).to(full.dtype))
        graphs[d].replay()
        torch.cuda.synchronize(d)
        assert torch.equal(ids.cpu(), ref.topc_select(full[:, 1:, :].cpu(), 32)[1])
        assert all(torch.equal(a, b) for a, b in zip(other, bufs[1 - d])), "a replay wrote the other device"
