"""Timing helpers: CUDA-graph replay (how a serving engine runs the ops), eager launches, and
wall-clock on the CPU.  Each timed function takes the index of an input set, so callers can
rotate among enough copies of their inputs to keep repeated calls from hitting in L2."""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch


def cuda_graph_us(fn: Callable[[int], object], num_sets: int = 1, calls: int = 20, replays: int = 25) -> float:
    """Median µs per call: `calls` calls (rotating input sets) captured in one graph, replayed."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(max(2, num_sets)):
            fn(i % num_sets)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            fn(i % num_sets)
    graph.replay()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(replays):
        start.record()
        graph.replay()
        stop.record()
        stop.synchronize()
        samples.append(start.elapsed_time(stop) * 1e3 / calls)
    return statistics.median(samples)


def cuda_eager_us(fn: Callable[[int], object], num_sets: int = 1, calls: int = 20, repeats: int = 15) -> float:
    """Median µs per call of Python-launched calls, timed with CUDA events."""
    for i in range(max(2, num_sets)):
        fn(i % num_sets)
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(repeats):
        start.record()
        for i in range(calls):
            fn(i % num_sets)
        stop.record()
        stop.synchronize()
        samples.append(start.elapsed_time(stop) * 1e3 / calls)
    return statistics.median(samples)


def cpu_us(fn: Callable[[int], object], num_sets: int = 1, repeats: int = 5) -> float:
    """Median wall-clock µs per call on the CPU."""
    fn(0)
    samples = []
    for r in range(repeats):
        t0 = time.perf_counter()
        fn(r % num_sets)
        samples.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(samples)


def best_available_device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
