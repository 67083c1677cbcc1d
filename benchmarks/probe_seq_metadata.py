"""sconv_seq_metadata over request counts beyond bench.py's canonical batches: graph-replay µs
(bench.py's timing) at R requests of `tokens` tokens each, every result checked against the
reference first.  Up to 4096 requests the kernel stages query_start_loc in shared memory; the
staging's loads are what `benchmarks/experiments/seq_metadata_batched_staging.patch` changes
(above 256 requests each thread loads more than one entry).

    python benchmarks/probe_seq_metadata.py [--reqs 8,256,512,768,1024,2048,4096,8192] [--tokens 1,16]
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import xpress_ext  # noqa: E402
from xpress_ext import reference as ref  # noqa: E402
from xpress_ext import timing  # noqa: E402


def case(reqs: int, tokens: int):
    qsl = torch.arange(reqs + 1, dtype=torch.int32, device="cuda") * tokens
    T = reqs * tokens
    seq, first = (torch.empty(T, dtype=torch.int32, device="cuda") for _ in range(2))

    def fn(i):
        xpress_ext.ops.sconv_seq_metadata(qsl, reqs, T, seq, first)

    fn(0)
    es, ef = ref.sconv_seq_metadata(qsl, reqs, T)
    if not (torch.equal(seq, es) and torch.equal(first, ef)):
        raise SystemExit(f"probe_seq_metadata: wrong result at {reqs} x {tokens}")
    return fn


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reqs", default="8,256,512,768,1024,2048,4096,8192")
    p.add_argument("--tokens", default="1,16")
    a = p.parse_args(argv)
    print("| requests | tokens each | µs |")
    print("|---|---|---|")
    for tokens in (int(t) for t in a.tokens.split(",")):
        for reqs in (int(r) for r in a.reqs.split(",")):
            fn = case(reqs, tokens)
            print(f"| {reqs} | {tokens} | {timing.cuda_graph_us(fn):.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
