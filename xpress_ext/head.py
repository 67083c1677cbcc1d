"""XPressRefinerHead (seed 004) running every Jacobi pass on this package's ops.

A draft step refines the B-1 draft slots of each of N blocks with K greedy Jacobi passes:

    latent   xpress_ext.latent_pass            (one launch)
    readout  xpress_ext.readout_argmax_to_blk  (full vocabulary: readout, add and argmax; fused
    + argmax                                    -- a GEMV-shaped kernel up to 16 rows, a
                                                warpgroup-MMA GEMM past that on sm_90a builds --
                                                else cuBLAS into [rows, V] and add_argmax_to_blk)
             xpress_ext.gather_gemv_argmax_to_blk
                                               (top-C: W2's candidate rows read in place, their
                                                dot products and the argmax over the candidates;
                                                one launch while a cluster of 8 CTAs a row fits
                                                the SMs once (N = 1 at the canonical head), else
                                                gather_gemv and topc_argmax_to_blk)

Once per step the top-C path selects the candidates (xpress_ext.topc_select, which also writes
the starting argmax); in a captured CUDA graph that (or the full path's starting argmax) runs
on a second stream, beside the hidden cache's GEMMs.  The latent kernel loads its weights,
constant over a step, while the kernels before it finish (``prefetch_weights``).

Greedy and causal (slot b sees only tokens < b), so a settled prefix stays settled and
K >= B-1 passes reach the sequential greedy decode.
"""

from __future__ import annotations

import contextlib
import os
from typing import Mapping

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import ops

__all__ = ["XPressRefinerHead", "HYBRID_KEY_MAP", "CheckpointError"]

# Published checkpoint keys -> module attributes.  "mix.L" is the raw mixer of training; it is
# folded into the serving form (L * tril + I) on load.
HYBRID_KEY_MAP = {
    "w1.weight": "w1.weight",
    "down_h.weight": "down_h.weight",
    "down_g.weight": "down_g.weight",
    "in_proj.weight": "in_proj.weight",
    "mix.L": "__raw_mix_L__",
    "mlp.gate_proj.weight": "mlp_gate.weight",
    "mlp.up_proj.weight": "mlp_up.weight",
    "mlp.down_proj.weight": "mlp_down.weight",
    "w2.weight": "w2.weight",
}


def halves_fit(plan_a: list[int], plan_b: list[int], whole: list[int] | None = None) -> bool:
    """The automatic pass_groups rule, on the latent_pass_plan of each half of a step: two
    halves when both run the cluster kernel (plan[8], row tiles, is 0) and their scheduled
    groups (plan[12]) add up to at most a third more than the co-resident clusters (plan[4]),
    unless the whole step's plan (``whole``) runs the row tiles in pairs of CTAs (plan[13] is
    2): one group is then faster (H200, session 48, groups forced: 293.4-293.9 against
    298.0-298.3 µs at N = 32, 356.7-357.6 against 371.0-372.2 at N = 40; session 49, the rule's
    own choice at N = 2-66: the faster grouping, or one within 0.5 %, at every N timed).  A whole
    plan in quads of CTAs (plan[13] is 4, N = 16-30 on an H200) is not special-cased: the rule
    took the faster grouping or one level with it at N = 16 / 20 / 24 / 28 (session 50)."""
    if whole is not None and len(whole) > 13 and whole[13] == 2:
        return False
    fit = plan_a[4]
    return plan_a[8] == 0 and plan_b[8] == 0 and plan_a[12] + plan_b[12] <= fit + fit // 3


class CheckpointError(ValueError):
    """A checkpoint that does not match the head: missing, unexpected or misshapen keys."""


class XPressRefinerHead(nn.Module):
    def __init__(
        self,
        vocab_size: int,
        hidden_size: int,
        block_size: int,
        rank: int = 256,
        mlp_hidden: int = 512,
        max_num_reqs: int = 256,
        topc: int = 512,
        latent_table: bool = True,
        pass_groups: int | None = None,
    ) -> None:
        super().__init__()
        if block_size < 2:
            raise ValueError(f"block_size must be >= 2 (an anchor and a draft slot), got {block_size}")
        self.vocab_size = int(vocab_size)
        self.hidden_size = int(hidden_size)
        self.block_size = int(block_size)
        self.rank = int(rank)
        self.mlp_hidden = int(mlp_hidden)
        self.max_num_reqs = int(max_num_reqs)
        # Score each pass on the base logits' top-C candidates instead of the whole vocabulary
        # (0 = exact full-vocabulary scoring).  Under top-C a token outside the candidates can
        # never be drafted, so the fixed point is no longer the exact sequential decode.
        self.topc = int(topc)
        # Keep latent_embed_table(w1, wlat_t) beside the weights (4 * vocab_size * rank bytes: 156
        # MB at 151,936 x 256) so each pass reads a token's first product instead of computing
        # it: the same drafts, a shorter latent pass (benchmarks/RESULTS.md).
        self.latent_table = bool(latent_table)
        r = self.rank
        self.w1 = nn.Embedding(vocab_size, r)
        self.down_h = nn.Linear(hidden_size, r, bias=False)
        self.down_g = nn.Linear(hidden_size, r, bias=False)
        self.in_proj = nn.Linear(3 * r, r, bias=False)
        # Stored folded (L * tril + I): a pass is one mix with no mask and no residual add.
        self.mix_L = nn.Parameter(torch.eye(block_size).expand(r, -1, -1).contiguous())
        self.mlp_gate = nn.Linear(r, mlp_hidden, bias=False)
        self.mlp_up = nn.Linear(r, mlp_hidden, bias=False)
        self.mlp_down = nn.Linear(mlp_hidden, r, bias=False)
        self.w2 = nn.Linear(r, vocab_size, bias=False)
        self._scratch: dict | None = None
        self._fused_buf: dict | None = None
        self._sides: dict[int, list[torch.cuda.Stream]] = {}
        # Top-C draft steps in a captured CUDA graph: the requests split into this many groups
        # (at most N), each group's passes on a stream of its own, the groups' kernels running
        # side by side (the drafts are the same: every op of a pass is per request).  None:
        # two or one by the latent kernel's plan (_group_count).  Eager steps never split.
        self.pass_groups = pass_groups
        self._group_counts: dict[tuple, int] = {}  # automatic choices, by (N, device, dtype)
        self._mix_L_loaded = False

    @property
    def pass_groups(self) -> int | None:
        return self._pass_groups_setting

    @pass_groups.setter
    def pass_groups(self, value: int | None) -> None:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"pass_groups must be None (automatic) or an int >= 1, got {value!r}")
        self._pass_groups_setting = value

    # -- buffers ------------------------------------------------------------------------------

    def _scratch_buffers(self, dtype: torch.dtype, device: torch.device) -> dict:
        """Per-pass buffers of the full-vocabulary path, allocated once at max_num_reqs (on the
        first call: the dtype and device the head serves on are known only then).  No [rows, V]
        readout buffer: readout_argmax_to_blk's fused kernels never store the readout, and its
        GEMM path (CPU, fp32, builds without sm_90a) takes a temporary of the call's rows (1.17
        GB at max_num_reqs = 256 held for nothing on an H200 before session 25)."""
        if self._scratch is None or self._scratch["lat"].dtype != dtype or self._scratch["lat"].device != device:
            self._scratch = {
                "lat": torch.empty(self.max_num_reqs, self.block_size - 1, self.rank, dtype=dtype, device=device),
            }
        return self._scratch

    @staticmethod
    def _captured_on(device: torch.device) -> bool:
        """Whether a CUDA graph is being captured on ``device``'s current stream (never while
        torch.compile traces: it would not see the streams)."""
        return device.type == "cuda" and not torch.compiler.is_compiling() and torch.cuda.is_current_stream_capturing()

    def _side_streams(self, device: torch.device, count: int) -> list[torch.cuda.Stream]:
        """``count`` distinct streams, none of them the current one, while a CUDA graph is
        captured on ``device`` (else, or if the pool cannot supply them, an empty list): only
        there do a fork and a join cost nothing at replay.  Launched eagerly a step at small N
        is bound by the host's launches (H200: 310-440 us of launches against 86-270 us of GPU
        work at N = 1), so overlapping GPU work gains nothing and the fork's event record and
        wait would only add host work."""
        if not self._captured_on(device):
            return []
        index = torch.cuda.current_device() if device.index is None else device.index
        # torch.cuda.Stream() hands out streams round-robin from a pool of 32, the pool
        # torch.cuda.graph takes its default capture stream from: a side stream must not be the
        # stream being captured, or the fork is a no-op and the work runs serially
        # (test_side_stream_is_never_the_graph_capture_stream).
        current = torch.cuda.current_stream(index)
        pool = [s for s in self._sides.get(index, []) if s != current]
        for _ in range(64):
            if len(pool) >= count:
                break
            side = torch.cuda.Stream(index)
            if side != current and side not in pool:
                pool.append(side)
        self._sides[index] = pool
        if len(pool) >= count:
            return pool[:count]
        return []  # (a pool that cannot supply them: no fork)

    @torch.no_grad()
    def process_weights_after_loading(self) -> None:
        """Transposed, contiguous weight copies the fused ops read directly.  A reload refills
        them in place, so captured CUDA graphs keep their addresses."""
        r = self.rank
        w = self.in_proj.weight.detach()
        # The hidden cache's projection folded into one [2 * hidden_size, r] weight (products
        # in fp32, rounded once): [h, mean_b h] @ wxh is hidden_cache(h) @ in_proj_h^T.
        whc_t = w[:, : 2 * r].t().float()
        wxh = torch.cat([self.down_h.weight.detach().t().float() @ whc_t[:r],
                         self.down_g.weight.detach().t().float() @ whc_t[r:]], dim=0)
        fused = {
            "wxh": wxh.to(w.dtype).contiguous(),
            "wlat_t": w[:, 2 * r :].t().contiguous(),
            "mix_kjc": self.mix_L.detach().permute(1, 2, 0).contiguous(),
            "wg_t": self.mlp_gate.weight.detach().t().contiguous(),
            "wu_t": self.mlp_up.weight.detach().t().contiguous(),
            "wd_t": self.mlp_down.weight.detach().t().contiguous(),
        }
        if self.latent_table:
            fused["emb_lat"] = ops.latent_embed_table(self.w1.weight.detach(), fused["wlat_t"])
        # The latent weights as the CUDA row-tile kernel's stages (1 MB at the canonical head), so
        # that kernel fills each stage of its weight stream with one bulk copy: the same drafts.
        if w.is_cuda and ops.latent_pack_defined(r, self.mlp_hidden, self.block_size, w.dtype):
            fused["wpack"] = ops.latent_pack_weights(fused["wlat_t"], fused["mix_kjc"], fused["wg_t"],
                                                     fused["wu_t"], fused["wd_t"])
        # No transposed W2 copy (the seed's "w2_t", 78 MB at V=152k): the readout is an NT GEMM
        # on w2.weight itself, as fast in cuBLAS and much faster in torch's CPU GEMM.
        same_layout = self._fused_buf is not None and self._fused_buf.keys() == fused.keys() and all(
            self._fused_buf[k].shape == v.shape and self._fused_buf[k].dtype == v.dtype
            and self._fused_buf[k].device == v.device for k, v in fused.items()
        )
        if same_layout:
            for key, tensor in fused.items():
                self._fused_buf[key].copy_(tensor)
        else:
            self._fused_buf = fused

    @torch.no_grad()
    def fold_from_raw_(self, raw_L: torch.Tensor) -> None:
        """mix_L = raw_L * tril + I: training's raw mixer plus its sublayer residual, x + (L*tril)x,
        as the one mix the passes apply."""
        B = self.block_size
        tril = torch.tril(torch.ones(B, B, dtype=raw_L.dtype, device=raw_L.device))
        eye = torch.eye(B, dtype=raw_L.dtype, device=raw_L.device)
        self.mix_L.copy_(raw_L * tril + eye)
        self._mix_L_loaded = True

    # -- checkpoints --------------------------------------------------------------------------

    def _expected_shapes(self) -> dict[str, tuple[int, ...]]:
        shapes = {}
        for key, attr in HYBRID_KEY_MAP.items():
            if attr == "__raw_mix_L__":
                shapes[key] = tuple(self.mix_L.shape)
            else:
                shapes[key] = tuple(self.get_parameter(attr).shape)
        return shapes

    @torch.no_grad()
    def load_checkpoint(self, path_or_state_dict: str | os.PathLike | Mapping[str, torch.Tensor]) -> None:
        """Loads the published key layout (HYBRID_KEY_MAP) from a safetensors file, a
        ``torch.save`` file or a state dict: copies each tensor into its parameter in place
        (dtype and device of the head), folds the raw mixer, rebuilds the fused buffers.
        Raises CheckpointError naming the key on a missing key, an unexpected key or a shape
        that does not match this head; nothing is modified then."""
        if isinstance(path_or_state_dict, Mapping):
            state = dict(path_or_state_dict)
        else:
            path = os.fspath(path_or_state_dict)
            if path.endswith(".safetensors"):
                from safetensors.torch import load_file

                state = load_file(path)
            else:
                state = torch.load(path, map_location="cpu", weights_only=True)
        expected = self._expected_shapes()
        missing = [k for k in expected if k not in state]
        unexpected = [k for k in state if k not in expected]
        if missing:
            raise CheckpointError(f"checkpoint is missing key(s) {missing}; expected the keys of HYBRID_KEY_MAP")
        if unexpected:
            raise CheckpointError(f"checkpoint has unexpected key(s) {unexpected}; expected the keys of HYBRID_KEY_MAP")
        for key, shape in expected.items():
            if tuple(state[key].shape) != shape:
                raise CheckpointError(
                    f"checkpoint key {key!r} has shape {tuple(state[key].shape)}, but this head "
                    f"(vocab_size={self.vocab_size}, hidden_size={self.hidden_size}, block_size="
                    f"{self.block_size}, rank={self.rank}, mlp_hidden={self.mlp_hidden}) needs {shape}"
                )
        for key, attr in HYBRID_KEY_MAP.items():
            if attr == "__raw_mix_L__":
                self.fold_from_raw_(state[key].to(self.mix_L.device, self.mix_L.dtype))
            else:
                p = self.get_parameter(attr)
                p.copy_(state[key].to(p.device, p.dtype))
        self.process_weights_after_loading()

    def published_state_dict(self, raw_mix_L: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """This head's weights under the published keys.  ``raw_mix_L`` is the unfolded mixer to
        publish (the folded parameter cannot be unfolded exactly: the diagonal was shifted by I)."""
        out = {}
        for key, attr in HYBRID_KEY_MAP.items():
            if attr == "__raw_mix_L__":
                if raw_mix_L is None:
                    B = self.block_size
                    raw_mix_L = (self.mix_L.detach() - torch.eye(B, device=self.mix_L.device, dtype=self.mix_L.dtype))
                out[key] = raw_mix_L.detach().clone()
            else:
                out[key] = self.get_parameter(attr).detach().clone()
        return out

    def _check_hidden(self, h_full: torch.Tensor, N: int | None = None) -> None:
        """h_full must be [N, block_size, hidden_size] (N: the step's requests, when given)."""
        if (h_full.dim() != 3 or tuple(h_full.shape[1:]) != (self.block_size, self.hidden_size)
                or (N is not None and h_full.shape[0] != N)):
            raise ValueError(
                f"h_full has shape {tuple(h_full.shape)}; this head expects [N{'' if N is None else f'={N}'}, "
                f"block_size={self.block_size}, hidden_size={self.hidden_size}]"
            )

    def _fused_buffers(self) -> dict:
        if self._fused_buf is None:
            raise RuntimeError(
                "the fused buffers are built from the loaded weights; call "
                "process_weights_after_loading() (or load_checkpoint()) first"
            )
        return self._fused_buf

    # -- the math (eager torch; the fused path below runs the same math on the custom ops) ----

    def hidden_cache(self, h_full: torch.Tensor) -> torch.Tensor:
        """Pass-invariant half of the latent input, computed once per draft step: [N, B, 2r]."""
        g = h_full.mean(dim=1, keepdim=True).expand_as(h_full)
        return torch.cat([self.down_h(h_full), self.down_g(g)], dim=-1)

    def _refine_latent(self, prev_ids: torch.Tensor, hcache: torch.Tensor) -> torch.Tensor:
        lat = self.w1(prev_ids)
        x = self.in_proj(torch.cat([hcache, lat], dim=-1))
        # Per-channel causal mix: slot k sees only j <= k, which makes Jacobi iteration valid.
        x = torch.bmm(self.mix_L.to(x.dtype), x.permute(2, 1, 0)).permute(2, 1, 0)
        return x + self.mlp_down(F.silu(self.mlp_gate(x)) * self.mlp_up(x))

    def refine_bias(self, prev_ids: torch.Tensor, hcache: torch.Tensor) -> torch.Tensor:
        """[N, B, V] refiner logits for the block whose slot b follows prev_ids[:, b]."""
        return self.w2(self._refine_latent(prev_ids, hcache))

    # -- the fused draft step -----------------------------------------------------------------

    def jacobi_refine_greedy(
        self,
        base_logits_full: torch.Tensor,
        h_full: torch.Tensor,
        anchor_ids: torch.Tensor,
        tok_am1_ids: torch.Tensor,
        num_passes: int,
    ) -> torch.Tensor:
        """One draft step: [N, B-1] draft tokens after ``num_passes`` greedy Jacobi passes.

        base_logits_full [N, B, V] (the head's dtype), h_full [N, B, hidden_size], anchor_ids
        and tok_am1_ids [N] int64 (the verified anchor and the token before it)."""
        step = self.prepare_step(base_logits_full, h_full, anchor_ids, tok_am1_ids)
        groups, sides = self._pass_groups(step)
        if not sides:
            for _ in range(num_passes):
                self.jacobi_pass(step)
            return step["blk"][:, 1:]
        current = torch.cuda.current_stream(step["blk"].device)
        streams = [current] + sides
        for s in sides:
            s.wait_stream(current)
        for _ in range(num_passes):
            for part, s in zip(groups, streams):
                with torch.cuda.stream(s):
                    self.jacobi_pass(part)
        for s in sides:
            current.wait_stream(s)
        return step["blk"][:, 1:]

    def _group_count(self, step: dict) -> int:
        """How many groups a top-C step's passes run in (see pass_groups).  Automatic: two
        halves while their latent kernels together take at most a third more clusters than fit
        on the GPU at once (latent_pass_plan), so that each half's clusters mostly run beside
        the other half's readout instead of queueing behind its own, and the whole step's latent
        kernel does not run in pairs of CTAs (halves_fit); else one.  Measured on the H200
        (benchmarks/RESULTS.md, session 37; canonical head, K = 6, graph replay): the rule took
        two halves at N = 2-20 and 32-40, 1-7 % faster (301 against 317 µs at N = 32) except N =
        3 (1 % slower), and one group at N = 24 and 28 (where two halves, 24 and 28 clusters of
        15, were 2-5 % slower) and from N = 41 (from N = 64 each half's latent kernel takes two
        rounds by itself).  Since session 48 the pairs (N = 31-66 on an H200) make one group
        faster at N = 32 and 40 as well, so the rule splits only N = 2-20."""
        N = step["N"]
        if self.pass_groups is not None:
            return min(self.pass_groups, N)
        device = step["blk"].device
        if N < 2 or not self._captured_on(device):
            return 1
        index = torch.cuda.current_device() if device.index is None else device.index
        key = (N, index, step["lat"].dtype)
        if key not in self._group_counts:
            plans = [
                torch.ops.xpress_ext.latent_pass_plan(n, self.block_size, self.rank, self.mlp_hidden,
                                                      step["lat"].dtype, index)
                for n in (N // 2, N - N // 2, N)
            ]
            self._group_counts[key] = 2 if halves_fit(*plans) else 1
        return self._group_counts[key]

    _STEP_SCALARS = frozenset({"N", "rows", "gemv_reverse", "readout_reverse"})

    def _pass_groups(self, step: dict) -> tuple[list[dict], list[torch.cuda.Stream]]:
        """The step split by requests into contiguous groups (views: each a step of its own for
        ``jacobi_pass``) and the streams of all groups but the first (which runs on the current
        stream): more than one group only on the top-C path, in a captured CUDA graph."""
        # Only the keys below are split: a step with others (a subclass's scratch, which the
        # groups would share) runs as one group.
        keys = ("blk", "tok_am1", "xh", "lat", "cand", "base_c", "slots")
        if "cand" not in step or not set(step) <= set(keys) | self._STEP_SCALARS:
            return [step], []
        count = self._group_count(step)
        sides = self._side_streams(step["blk"].device, count - 1) if count > 1 else []
        if not sides:
            return [step], []
        N = step["N"]
        bounds = [N * g // count for g in range(count + 1)]
        groups = [
            dict({k: step[k][a:b] for k in keys if k in step}, N=b - a, rows=(b - a) * (self.block_size - 1))
            for a, b in zip(bounds, bounds[1:])
        ]
        return groups, sides

    def prepare_step(
        self,
        base_logits_full: torch.Tensor,
        h_full: torch.Tensor,
        anchor_ids: torch.Tensor,
        tok_am1_ids: torch.Tensor,
    ) -> dict:
        """The pass-invariant part of a draft step: the block buffer (anchor + starting argmax),
        the projected hidden cache and, on the top-C path, the candidates and their base logits.
        ``jacobi_pass`` then refines ``step["blk"]`` in place."""
        N, B, V = base_logits_full.shape
        if B != self.block_size or V != self.vocab_size:
            raise ValueError(
                f"base_logits_full has shape {tuple(base_logits_full.shape)}; this head expects "
                f"[N, block_size={self.block_size}, vocab_size={self.vocab_size}]"
            )
        if N > self.max_num_reqs:
            raise ValueError(
                f"{N} requests exceeds the max_num_reqs={self.max_num_reqs} the scratch buffers were sized for"
            )
        # Both raise before anything is launched (project_hidden, below, checks again for its
        # direct callers).
        self._check_hidden(h_full, N)
        self._fused_buffers()
        r = self.rank
        rows = N * (B - 1)
        slots = base_logits_full[:, 1:, :]  # read in place: [N, B-1, V] view
        blk = torch.empty(N, B, dtype=torch.long, device=base_logits_full.device)
        step = dict(blk=blk, tok_am1=tok_am1_ids, slots=slots, N=N, rows=rows)
        # The starting tokens (and on the top-C path the candidates) need only the base logits:
        # in a captured CUDA graph they run on a side stream, beside the hidden cache's GEMMs on
        # this one, and this stream waits for them before the passes (a fork and a join).  The
        # anchor's copy into blk[:, 0] needs neither, so it takes a second side stream: on this
        # one it held the hidden cache's kernels back by a launch (at N = 1 this stream's chain,
        # not the selection, is the step's start; RESULTS.md, session 68).
        sides = self._side_streams(slots.device, 2) or self._side_streams(slots.device, 1)
        side = sides[0] if sides else None
        anchor_side = sides[1] if len(sides) > 1 else None
        current = torch.cuda.current_stream(slots.device) if sides else None
        for s in sides:
            s.wait_stream(current)
        if self.topc:
            # Candidates and their base logits once per step (one topc_select launch, which
            # also writes the starting argmax into blk); each pass then reads the candidates' C
            # rows of W2 in place instead of all of it.  Candidates come in ascending id order,
            # so a tie between two candidates' scores goes to the lower vocab id, as on the full
            # path.
            c = min(self.topc, V)
            base_c = torch.empty(N, B - 1, c, dtype=slots.dtype, device=slots.device)
            cand = torch.empty(N, B - 1, c, dtype=torch.long, device=slots.device)
            # Beside the GEMMs it leaves them half the SMs: at N = 1 (15 rows) 4 CTAs a row
            # instead of 8, 64.0-64.3 against 64.7-64.8 us a step on an H200 (RESULTS.md,
            # session 63); alone (no side stream) 8 are faster.
            margin = torch.cuda.get_device_properties(slots.device).multi_processor_count // 2 if side is not None else 0
            with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
                ops.topc_select(slots, c, base_c, cand, blk, sm_margin=margin)
            step.update(
                base_c=base_c,
                cand=cand,
                lat=torch.empty(N, B - 1, r, dtype=h_full.dtype, device=h_full.device),
            )
        else:
            with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
                ops.add_argmax_to_blk(slots, None, blk)  # the argmax of the base logits alone
            sc = self._scratch_buffers(h_full.dtype, h_full.device)
            step.update(lat=sc["lat"][:N])
        with torch.cuda.stream(anchor_side) if anchor_side is not None else contextlib.nullcontext():
            blk[:, 0] = anchor_ids
        step["xh"] = self.project_hidden(h_full)
        for s in sides:
            current.wait_stream(s)
        return step

    def project_hidden(self, h_full: torch.Tensor) -> torch.Tensor:
        """xh [N, B, r], the latent pass's pass-invariant input: hidden_cache(h_full) projected
        by in_proj's first 2r columns, as one GEMM on the folded weights, [h, mean_b h] @ wxh
        (two launches -- ``hidden_mean_concat`` and the GEMM -- instead of six: the mean, two
        projections, the expansion's copy, the concat and the GEMM).  Rounding: the mean and the
        output are rounded as before, the hidden cache itself is not, the folded weights are
        (once); the mean error against an fp64 evaluation is the same as the module's
        (H200, bf16, synthetic head).  At N = 1 this is the longer branch of a step's start
        (RESULTS.md, sessions 68-69)."""
        self._check_hidden(h_full)
        N, B, hidden = h_full.shape
        hg = torch.empty(N, B, 2 * hidden, dtype=h_full.dtype, device=h_full.device)
        ops.hidden_mean_concat(h_full, hg)
        return torch.mm(hg.view(N * B, 2 * hidden), self._fused_buffers()["wxh"]).view(N, B, self.rank)

    def jacobi_pass(self, step: dict) -> None:
        """One greedy Jacobi pass on the custom ops: latent, readout, fused argmax into
        step["blk"] (the [rows, V] sum never materialised; on the full path's fused kernels not
        the [rows, V] readout either, and on the top-C path no [rows, C, r] copy of W2's
        candidate rows)."""
        buf = self._fused_buf
        blk, lat = step["blk"], step["lat"]
        # prefetch_weights: nothing a step runs writes the fused weights (a reload happens
        # between steps), so the kernel may copy them before the kernels ahead of it finish.
        ops.latent_pass(blk, step["tok_am1"], step["xh"], lat, self.w1.weight, buf["wlat_t"],
                        buf["mix_kjc"], buf["wg_t"], buf["wu_t"], buf["wd_t"], do_mlp=True,
                        prefetch_weights=True, emb_lat=buf.get("emb_lat"),
                        wpack=buf.get("wpack"))
        if "cand" in step:
            # Every other pass walks the candidates' rows from the last: it starts on the rows
            # the pass before read last, still in L2 (same bits either way).
            reverse = step.get("gemv_reverse", False)
            # prefetch: nothing a step's passes run writes W2, the candidates or their base
            # logits (topc_select wrote them at the step's start, before the passes' first
            # kernel), so the kernel loads the candidates' rows while the latent pass before it
            # runs.
            ops.gather_gemv_argmax_to_blk(self.w2.weight, step["cand"], lat, step["base_c"], blk, reverse,
                                          prefetch=True)
            step["gemv_reverse"] = not reverse
        else:
            # prefetch_weights: W2 and the base logits are constant over a step.  Every other pass
            # walks W2 from its last rows (same ids), starting on the rows the pass before read
            # last, which L2 may still hold.
            reverse = step.get("readout_reverse", False)
            ops.readout_argmax_to_blk(step["slots"], lat, self.w2.weight, blk, None, prefetch_weights=True,
                                      reverse=reverse)
            step["readout_reverse"] = not reverse
