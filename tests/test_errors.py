"""Bad input raises the right Python exception, names the argument, and writes nothing."""

import pytest
import torch
from xpress_testing import DEVICES, latent_inputs, needs_cuda

import xpress_ext

N, B, R, H, V, C = 3, 5, 64, 96, 50, 7


def latent_case(device):
    inp = latent_inputs(N, B, R, H, V, torch.bfloat16, device)
    inp["lat_out"] = torch.full((N, B - 1, R), 3.0, dtype=torch.bfloat16, device=device)
    inp["do_mlp"] = True
    return inp


def call_latent(a):
    xpress_ext.latent_pass(
        a["blk"], a["tok_am1"], a["xh"], a["lat_out"], a["w1"], a["wlat_t"], a["mix_kjc"],
        a["wg_t"], a["wu_t"], a["wd_t"], a["do_mlp"],
    )


def _noncontig_last(t):
    return t.t().contiguous().t()  # same shape, strides (1, rows)


LATENT_BAD = [
    # (name, change, exception, pattern)
    ("blk int32", lambda a: a.update(blk=a["blk"].int()), TypeError, "blk must be Long"),
    ("xh float64", lambda a: a.update(xh=a["xh"].double()), TypeError, "xh must be bfloat16, float16 or float32"),
    ("w1 dtype", lambda a: a.update(w1=a["w1"].half()), TypeError, "w1 must have xh's dtype"),
    ("lat_out dtype", lambda a: a.update(lat_out=a["lat_out"].float()), TypeError, "lat_out must have xh's dtype"),
    ("tok_am1 float", lambda a: a.update(tok_am1=a["tok_am1"].float()), TypeError, "tok_am1 must be Long"),
    ("blk rank", lambda a: a.update(blk=a["blk"].view(-1)), ValueError, "blk must have 2 dimensions"),
    ("xh rank", lambda a: a.update(xh=a["xh"][0]), ValueError, "xh must have 3 dimensions"),
    ("xh B", lambda a: a.update(xh=a["xh"][:, :-1]), ValueError, r"xh.shape\[1\] must be 5"),
    ("tok_am1 N", lambda a: a.update(tok_am1=a["tok_am1"][:-1]), ValueError, r"tok_am1.shape\[0\] must be 3"),
    ("lat_out B", lambda a: a.update(lat_out=a["lat_out"][:, :-1]), ValueError, r"lat_out.shape\[1\] must be 4"),
    ("w1 R", lambda a: a.update(w1=a["w1"][:, :-1]), ValueError, r"w1.shape\[1\] must be 64"),
    ("wlat_t", lambda a: a.update(wlat_t=a["wlat_t"][:-1]), ValueError, r"wlat_t.shape\[0\] must be 64"),
    ("mix_kjc", lambda a: a.update(mix_kjc=a["mix_kjc"][:, :-1]), ValueError, r"mix_kjc.shape\[1\] must be 5"),
    ("wg_t R", lambda a: a.update(wg_t=a["wg_t"][:-1]), ValueError, r"wg_t.shape\[0\] must be 64"),
    ("wu_t H", lambda a: a.update(wu_t=a["wu_t"][:, :-1]), ValueError, r"wu_t.shape\[1\] must be 96"),
    ("wd_t H", lambda a: a.update(wd_t=a["wd_t"][:-1]), ValueError, r"wd_t.shape\[0\] must be 96"),
    ("w1 stride", lambda a: a.update(w1=_noncontig_last(a["w1"])), ValueError, "w1 must have unit stride"),
    ("tok_am1 stride", lambda a: a.update(tok_am1=a["tok_am1"].repeat_interleave(2)[::2]), ValueError, "tok_am1 must have unit stride"),
    ("lat_out expanded", lambda a: a.update(lat_out=a["lat_out"][:, :1].expand(N, B - 1, R)), ValueError, "lat_out has elements that share memory"),
    ("lat_out aliases xh", lambda a: a.update(lat_out=a["xh"].view(-1)[R : R + N * (B - 1) * R].view(N, B - 1, R)), ValueError, "lat_out overlaps the input xh"),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,change,exc,pattern", LATENT_BAD, ids=[c[0] for c in LATENT_BAD])
def test_latent_pass_errors(device, name, change, exc, pattern):
    a = latent_case(device)
    change(a)
    before = a["lat_out"].clone()
    with pytest.raises(exc, match=pattern):
        call_latent(a)
    assert torch.equal(a["lat_out"], before), "a rejected call wrote its output"


def argmax_case(device):
    return dict(
        base=torch.randn(N * (B - 1), V, device=device),
        bias=torch.randn(N, B - 1, V, device=device),
        blk=torch.full((N, B), -3, dtype=torch.long, device=device),
    )


ARGMAX_BAD = [
    ("base int", lambda a: a.update(base=a["base"].long()), TypeError, "base must be bfloat16, float16 or float32"),
    ("bias dtype", lambda a: a.update(bias=a["bias"].half()), TypeError, "bias must have base's dtype"),
    ("blk int32", lambda a: a.update(blk=a["blk"].int()), TypeError, "blk must be Long"),
    ("blk rank", lambda a: a.update(blk=a["blk"].view(-1)), ValueError, "blk must have 2 dimensions"),
    ("base rank", lambda a: a.update(base=a["base"].view(-1)), ValueError, "base must be"),
    ("base rows", lambda a: a.update(base=a["base"][:-1]), ValueError, r"base.shape\[0\] must be 12"),
    ("bias B", lambda a: a.update(bias=a["bias"][:, :-1]), ValueError, r"bias.shape\[1\] must be 4"),
    ("bias V", lambda a: a.update(bias=a["bias"][..., :-1]), ValueError, "bias.shape\\[-1\\] must be V"),
    ("base stride", lambda a: a.update(base=_noncontig_last(a["base"])), ValueError, "base must have unit stride"),
    ("V = 0", lambda a: a.update(base=a["base"][:, :0], bias=a["bias"][..., :0]), ValueError, r"\(V\) must be >= 1"),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,change,exc,pattern", ARGMAX_BAD, ids=[c[0] for c in ARGMAX_BAD])
def test_add_argmax_errors(device, name, change, exc, pattern):
    a = argmax_case(device)
    change(a)
    before = a["blk"].clone()
    with pytest.raises(exc, match=pattern):
        xpress_ext.add_argmax_to_blk(a["base"], a["bias"], a["blk"])
    assert torch.equal(a["blk"], before)


def topc_case(device):
    return dict(
        base_c=torch.randn(N, B - 1, C, device=device),
        bias_c=torch.randn(N, B - 1, C, device=device),
        cand=torch.randint(0, 100, (N, B - 1, C), device=device),
        blk=torch.full((N, B), -3, dtype=torch.long, device=device),
    )


TOPC_BAD = [
    ("cand float", lambda a: a.update(cand=a["cand"].float()), TypeError, "cand must be Long"),
    ("bias_c dtype", lambda a: a.update(bias_c=a["bias_c"].bfloat16()), TypeError, "bias_c must have base_c's dtype"),
    ("base_c 2d", lambda a: a.update(base_c=a["base_c"].view(-1, C)), ValueError, "base_c must have 3 dimensions"),
    ("cand C", lambda a: a.update(cand=a["cand"][..., :-1]), ValueError, r"cand.shape\[2\] must be 7"),
    ("bias_c N", lambda a: a.update(bias_c=a["bias_c"][:-1]), ValueError, r"bias_c.shape\[0\] must be 3"),
    ("C = 0", lambda a: a.update(base_c=a["base_c"][..., :0], bias_c=a["bias_c"][..., :0], cand=a["cand"][..., :0]), ValueError, r"\(C, candidates per slot\) must be >= 1"),
    ("cand stride", lambda a: a.update(cand=a["cand"].transpose(1, 2).contiguous().transpose(1, 2)), ValueError, "cand must have unit stride"),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,change,exc,pattern", TOPC_BAD, ids=[c[0] for c in TOPC_BAD])
def test_topc_argmax_errors(device, name, change, exc, pattern):
    a = topc_case(device)
    change(a)
    before = a["blk"].clone()
    with pytest.raises(exc, match=pattern):
        xpress_ext.topc_argmax_to_blk(a["base_c"], a["bias_c"], a["cand"], a["blk"])
    assert torch.equal(a["blk"], before)


@needs_cuda
@pytest.mark.parametrize("arg", ["xh", "w1", "wd_t", "tok_am1"])
def test_latent_mixed_devices(arg):
    a = latent_case("cuda")
    a[arg] = a[arg].cpu()
    with pytest.raises(ValueError, match=f"{arg} is on cpu but blk is on cuda:0"):
        call_latent(a)


@needs_cuda
def test_argmax_mixed_devices():
    a = argmax_case("cuda")
    with pytest.raises(ValueError, match="bias is on cpu"):
        xpress_ext.add_argmax_to_blk(a["base"], a["bias"].cpu(), a["blk"])
    t = topc_case("cuda")
    with pytest.raises(ValueError, match="cand is on cpu"):
        xpress_ext.topc_argmax_to_blk(t["base_c"], t["bias_c"], t["cand"].cpu(), t["blk"])


# Strided views, where torch's own overlap checks give up: decided from the views' byte runs.
def _strided_cases(device):
    rows, V, c = 6, 40, 5
    buf = torch.randn(rows, 2 * V, device=device)
    ov = torch.zeros(rows * 3 + c, device=device)
    return rows, V, c, buf, [
        # (name, logits, values, error pattern or None for accepted)
        ("values = logits[:, :c]", buf[:, :V], buf[:, :c], "values overlaps the input logits"),
        ("values straddles logits' row ends", buf[:, :V], buf[:, V - 2 : V - 2 + c], "values overlaps the input logits"),
        ("values between logits' rows", buf[:, :V], buf[:, V : V + c], None),
        ("logits between values' rows", buf[:, V:], buf[:, :c], None),
        ("values rows overlap each other", buf[:, :V], ov.as_strided((rows, c), (3, 1)), "values has elements that share memory"),
        ("values rows apart (as_strided)", buf[:, :V], ov.new_zeros(rows * 7).as_strided((rows, c), (7, 1)), None),
    ]


@pytest.mark.parametrize("device", DEVICES)
def test_strided_overlap_decided(device):
    rows, V, c, buf, cases = _strided_cases(device)
    for name, logits, values, pattern in cases:
        ids = torch.full((rows, c), -7, dtype=torch.long, device=device)
        before = buf.clone()
        if pattern is None:
            logits_before = logits.clone()
            xpress_ext.topc_select(logits, c, values, ids)
            ref_i = torch.sort(logits.float(), dim=-1, descending=True, stable=True).indices
            assert torch.equal(logits, logits_before), f"{name}: the input was written"
            assert torch.equal(ids.sort(dim=-1).values, ref_i[:, :c].sort(dim=-1).values), name
            assert torch.equal(values, logits.gather(1, ids)), f"{name}: values are not the rows' values at ids"
            continue
        with pytest.raises(ValueError, match=pattern):
            xpress_ext.topc_select(logits, c, values, ids)
        assert torch.equal(buf, before), f"{name}: a rejected call wrote"
        assert bool((ids == -7).all()), f"{name}: a rejected call wrote ids"


@pytest.mark.parametrize("device", DEVICES)
def test_strided_overlap_outputs_of_one_storage(device):
    # ids (int64) and values (fp32) carved from one buffer: disjoint halves pass, shared bytes fail.
    rows, V, c = 4, 30, 3
    logits = torch.randn(rows, V, device=device)
    big = torch.zeros(rows, 2 * c, dtype=torch.long, device=device)
    xpress_ext.topc_select(logits, c, big.view(torch.float32)[:, :c], big[:, c:])
    assert torch.equal(big[:, c:].sort(dim=-1).values, logits.topk(c, dim=-1).indices.sort(dim=-1).values)
    with pytest.raises(ValueError, match="ids overlaps the input values"):
        xpress_ext.topc_select(logits, c, big.view(torch.float32)[:, :c], big[:, :c])


@pytest.mark.parametrize("device", DEVICES)
def test_strided_overlap_latent_out(device):
    # lat_out a strided view whose rows land inside xh's rows (same storage, spans intersect).
    a = latent_case(device)
    store = torch.zeros(N * (B - 1) * 2 * R + N * B * R, dtype=torch.bfloat16, device=device)
    xh = store[: N * B * R].view(N, B, R)
    xh.copy_(a["xh"])
    a["xh"] = xh
    a["lat_out"] = store.as_strided((N, B - 1, R), (2 * (B - 1) * R, 2 * R, 1), R)
    before = store.clone()
    with pytest.raises(ValueError, match="lat_out overlaps the input xh"):
        call_latent(a)
    assert torch.equal(store, before)
