"""Where a step's time goes on the GPU: one profiled call, per-phase busy time and top kernels.

Used by ``bench_train_step.py --profile DIR``: the phases are ``torch.profiler.record_function`` ranges (the
benchmark's ``Phases`` timers synchronise at both ends, so a phase's kernels run inside its wall window).
Per phase it prints the wall time, the GPU-busy time (union of kernel intervals in the window), the idle
share (host-bound time: Python, launches, CPU work such as image decoding) and the heaviest kernels. The
Chrome trace is written gzipped for ``chrome://tracing`` / Perfetto.
"""

from __future__ import annotations

import bisect
import gzip
import json
import shutil
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile


def busy_time(intervals: list[tuple[float, float]]) -> float:
    """Returns the length of the union of ``(start, end)`` intervals."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end <= reach:
            continue
        total += end - max(start, reach)
        reach = end
    return total


def phase_report(trace: dict, top: int) -> list[str]:
    """Returns the printed lines: per annotated phase name, calls, wall / GPU-busy ms, idle share, top kernels."""
    events = trace["traceEvents"]
    phases = [e for e in events if e.get("cat") == "user_annotation" and "dur" in e]
    kernels = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e]
    starts = sorted(k["ts"] for k in kernels)
    kernels.sort(key=lambda e: e["ts"])
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    heavy: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for phase in phases:
        start, end = phase["ts"], phase["ts"] + phase["dur"]
        inside = kernels[bisect.bisect_left(starts, start) : bisect.bisect_left(starts, end)]
        row = totals[phase["name"]]
        row[0] += 1
        row[1] += phase["dur"] / 1e3
        row[2] += busy_time([(k["ts"], k["ts"] + k["dur"]) for k in inside]) / 1e3
        for k in inside:
            heavy[phase["name"]][k["name"][:60]] += k["dur"] / 1e3
    lines = ["| phase | calls | wall ms | GPU busy ms | idle % | top kernels (ms) |"]
    lines.append("| --- | --- | --- | --- | --- | --- |")
    for name, (calls, wall, busy) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
        names = "; ".join(f"{k} {ms:.1f}" for k, ms in sorted(heavy[name].items(), key=lambda kv: -kv[1])[:top])
        idle = 100 * (1 - busy / wall) if wall else 0.0
        lines.append(f"| {name} | {calls} | {wall:.1f} | {busy:.1f} | {idle:.0f} | {names} |")
    return lines


def profiled(fn: Callable[[], object], out_dir: Path, label: str, top: int = 8) -> None:
    """Runs ``fn`` once under the CUDA profiler, prints the phase report and writes ``<label>.json.gz``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    cuda = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    with profile(activities=activities) as prof:
        fn()
        if cuda:
            torch.cuda.synchronize()
    raw = out_dir / f"{label}.json"
    prof.export_chrome_trace(str(raw))
    trace = json.loads(raw.read_text())
    with raw.open("rb") as src, gzip.open(f"{raw}.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    print(f"## profile: {label} (trace {raw}.gz)")
    for line in phase_report(trace, top):
        print(line, flush=True)
