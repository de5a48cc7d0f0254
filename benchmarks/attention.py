"""Attention benchmarks: naive vs chunked vs PyTorch's SDPA, and more.

Also MultiHeadAttention vs nn.MultiheadAttention, and the lecture's "three ways of processing
sequences" (an RNN, 1-D convolutions, self-attention).

Run:  .venv/bin/python benchmarks/attention.py            (a few minutes on a 2-core CPU)
      .venv/bin/python benchmarks/attention.py --quick    (seconds; what the test suite runs)

Every time is the median of ``--repeats`` forward+backward steps (course_lib.gpu.time_fn), timed in
interleaved rounds across the compared paths, and every ratio compares against a baseline measured
in the same run, so the ratios travel across machines.

Peak memory (course_lib.gpu.peak_memory) is the extra memory one forward+backward step needs above
what was in use before it:
- on CUDA: exact tensor bytes from the caching allocator (max_memory_allocated);
- on CPU: the rise of the process's resident set (Linux VmHWM after resetting it through
  /proc/self/clear_refs, with freed heap pages returned to the OS first). This counts everything
  the step touches at page granularity, so values under a few MB are noise; it is honest about
  what the OS has to provide, which tracemalloc (blind to torch's allocator) is not.

Targets (issue 3): MultiHeadAttention's fused path >= 0.95x the speed of the SDPA-based
nn.MultiheadAttention at T = 1024; chunked attention's peak memory at T = 8192 <= 1/8 of naive.
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm

from course_lib.attention import (
    MultiHeadAttention,
    causal_mask,
    chunked_attention,
    scaled_dot_product_attention,
)
from course_lib.gpu import count_parameters, get_device, peak_memory, time_fn
from course_lib.layers import FeedForward

MiB = 2**20


def _attention_paths(causal: bool, chunk_size: int) -> dict[str, Callable[..., Tensor]]:
    def naive(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        mask = causal_mask(q.shape[-2], device=q.device) if causal else None
        return scaled_dot_product_attention(q, k, v, mask)

    def chunked(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return chunked_attention(q, k, v, chunk_size=chunk_size, causal=causal)

    def sdpa(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return {"naive": naive, "chunked": chunked, "sdpa": sdpa}


def _train_step(
    fn: Callable[[], Tensor], inputs: Sequence[Tensor], dy: Tensor
) -> Callable[[], Any]:
    """One forward+backward; gradients are returned (so they count in memory) and then dropped."""
    return lambda: torch.autograd.grad(fn(), list(inputs), dy)


def _measure(
    steps: dict[str, Callable[[], Any]], *, repeats: int, device: torch.device
) -> dict[str, tuple[float, int]]:
    """Median ms and peak bytes of each step.

    The steps are timed in interleaved rounds (A, B, C, A, B, C, ...), so a burst of load from
    other processes slows every entry alike instead of skewing one ratio.
    """
    for step in steps.values():
        step()  # warm-up (lazy initialisation, allocator)
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            times[name].append(time_fn(step, repeats=1, warmup=0, device=device)["median_ms"])
    return {
        name: (statistics.median(ms), peak_memory(steps[name], device=device))
        for name, ms in times.items()
    }


def attention_sweep(
    *,
    lengths: Sequence[int],
    batch: int = 1,
    heads: int = 2,
    head_dim: int = 64,
    repeats: int = 3,
    chunk_size: int = 256,
    causal: bool = True,
    naive_max_bytes: float = 4 * 2**30,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """Time and peak memory of one forward+backward of the three attention paths, per length T.

    Returns one row per (path, T): ms, mem (bytes), max_err (vs SDPA's output), and a note.
    The naive path is skipped when its (B, H, T, T) tensors would need more than
    ``naive_max_bytes`` (about six of them are alive during backward).
    """
    device = torch.device(device)
    paths = _attention_paths(causal, chunk_size)
    rows = []
    for T in tqdm(lengths, desc="attention paths", disable=not progress):
        g = torch.Generator().manual_seed(T)
        q, k, v = (
            torch.randn(batch, heads, T, head_dim, generator=g).to(device, dtype).requires_grad_()
            for _ in range(3)
        )  # (B, H, T, D)
        dy = torch.randn(batch, heads, T, head_dim, generator=g).to(device, dtype)
        naive_bytes = 6 * batch * heads * T * T * torch.finfo(dtype).bits // 8
        steps, group = {}, {}
        for name, fn in paths.items():
            group[name] = {
                "path": name,
                "T": T,
                "ms": None,
                "mem": None,
                "max_err": None,
                "note": "",
            }
            if name == "naive" and naive_bytes > naive_max_bytes:
                group[name]["note"] = f"skipped: would need ~{naive_bytes / 2**30:.1f} GiB"
                continue
            with torch.no_grad():
                group[name]["max_err"] = (fn(q, k, v) - paths["sdpa"](q, k, v)).abs().max().item()
            steps[name] = _train_step(lambda fn=fn, q=q, k=k, v=v: fn(q, k, v), (q, k, v), dy)
        for name, (ms, mem) in _measure(steps, repeats=repeats, device=device).items():
            group[name].update(ms=ms, mem=mem)
        rows.extend(group.values())
    _add_ratios(rows, key="path", baseline="sdpa")
    return rows


def mha_comparison(
    *,
    lengths: Sequence[int],
    batch: int = 2,
    embed_dim: int = 256,
    heads: int = 4,
    repeats: int = 5,
    causal: bool = True,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """MultiHeadAttention (fused and manual) against nn.MultiheadAttention with the same weights.

    nn.MultiheadAttention calls torch's SDPA kernel when no weights are requested, so it is the
    "SDPA" baseline at module level (projections included on both sides).
    """
    device = torch.device(device)
    torch.manual_seed(0)
    ours_fused = MultiHeadAttention(embed_dim, heads, fused=True).to(device, dtype)
    ours_manual = MultiHeadAttention(embed_dim, heads, fused=False).to(device, dtype)
    ours_manual.load_state_dict(ours_fused.state_dict())
    ref = nn.MultiheadAttention(embed_dim, heads, batch_first=True).to(device, dtype)
    with torch.no_grad():
        ref.in_proj_weight.copy_(
            torch.cat(
                [ours_fused.q_proj.weight, ours_fused.k_proj.weight, ours_fused.v_proj.weight]
            )
        )
        ref.in_proj_bias.copy_(
            torch.cat([ours_fused.q_proj.bias, ours_fused.k_proj.bias, ours_fused.v_proj.bias])
        )
        ref.out_proj.load_state_dict(ours_fused.out_proj.state_dict())

    def run_ref(x: Tensor) -> Tensor:
        if not causal:
            return ref(x, x, x, need_weights=False)[0]
        mask = ~causal_mask(x.shape[1], device=x.device)  # torch's masks mark what is hidden
        return ref(x, x, x, attn_mask=mask, is_causal=True, need_weights=False)[0]

    modules = {
        "nn.MultiheadAttention": (ref, run_ref),
        "MultiHeadAttention(fused)": (ours_fused, lambda x: ours_fused(x, causal=causal)),
        "MultiHeadAttention(manual)": (ours_manual, lambda x: ours_manual(x, causal=causal)),
    }
    rows = []
    for T in tqdm(lengths, desc="MHA modules", disable=not progress):
        x = torch.randn(batch, T, embed_dim, generator=torch.Generator().manual_seed(T))
        x = x.to(device, dtype).requires_grad_()
        dy = torch.randn_like(x)
        steps, errors = {}, {}
        for name, (module, forward) in modules.items():
            with torch.no_grad():
                errors[name] = (forward(x) - run_ref(x)).abs().max().item()
            inputs = [x, *module.parameters()]
            steps[name] = _train_step(lambda forward=forward, x=x: forward(x), inputs, dy)
        for name, (ms, mem) in _measure(steps, repeats=repeats, device=device).items():
            rows.append({"module": name, "T": T, "ms": ms, "mem": mem, "max_err": errors[name]})
    _add_ratios(rows, key="module", baseline="nn.MultiheadAttention")
    return rows


class _ConvStack(nn.Module):
    """Two same-padded 1-D convolutions over time: (B, T, C) -> (B, T, C)."""

    def __init__(self, channels: int, kernel_size: int = 3) -> None:
        super().__init__()
        pad = kernel_size // 2
        self.conv1 = nn.Conv1d(channels, channels, kernel_size, padding=pad)
        self.conv2 = nn.Conv1d(channels, channels, kernel_size, padding=pad)

    def forward(self, x: Tensor) -> Tensor:
        h = x.transpose(1, 2)  # (B, C, T)
        h = self.conv2(torch.relu(self.conv1(h)))
        return h.transpose(1, 2)  # (B, T, C)


class _AttentionBlock(nn.Module):
    """Self-attention + a C -> C -> C MLP, residual: 4C^2 + 2C^2 weights, like GRU's 6C^2."""

    def __init__(self, channels: int, heads: int = 4) -> None:
        super().__init__()
        self.attn = MultiHeadAttention(channels, heads)
        self.mlp = FeedForward(channels, channels)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(x)
        return x + self.mlp(x)


class _GRU(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.rnn = nn.GRU(channels, channels, batch_first=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.rnn(x)[0]  # (B, T, C)


def three_ways(
    *,
    lengths: Sequence[int],
    batch: int = 4,
    channels: int = 128,
    repeats: int = 3,
    device: torch.device | str = "cpu",
    progress: bool = False,
) -> list[dict[str, Any]]:
    """GRU vs two 1-D convolutions vs a self-attention block of ~6 C^2 weights each.

    Reports forward+backward time per sequence, peak memory, and how time grows when T doubles
    (about 2x for linear cost, about 4x for quadratic once the T^2 term dominates).
    """
    device = torch.device(device)
    torch.manual_seed(0)
    models = {
        "GRU": (_GRU(channels), "T (one step per token)"),
        "Conv1d stack": (_ConvStack(channels), "2 (layers)"),
        "self-attention": (_AttentionBlock(channels), "1 (all pairs at once)"),
    }
    for model, _ in models.values():
        model.to(device)
    rows = []
    for T in tqdm(lengths, desc="three ways", disable=not progress):
        x = torch.randn(batch, T, channels, generator=torch.Generator().manual_seed(T)).to(device)
        x.requires_grad_()
        dy = torch.randn_like(x)
        steps = {
            name: _train_step(lambda model=model, x=x: model(x), [x, *model.parameters()], dy)
            for name, (model, _) in models.items()
        }
        for name, (ms, mem) in _measure(steps, repeats=repeats, device=device).items():
            model, sequential = models[name]
            rows.append(
                {
                    "model": name,
                    "params": count_parameters(model),
                    "sequential steps": sequential,
                    "T": T,
                    "ms_per_seq": ms / batch,
                    "mem": mem,
                }
            )
    previous: dict[str, dict[str, Any]] = {}
    for row in rows:
        before = previous.get(row["model"])
        row["growth"] = (
            row["ms_per_seq"] / before["ms_per_seq"]
            if before and row["T"] == 2 * before["T"]
            else None
        )
        previous[row["model"]] = row
    return rows


def _add_ratios(rows: list[dict[str, Any]], *, key: str, baseline: str) -> None:
    """Add speed (baseline ms / ms, >1 = faster) and memory (mem / baseline mem) ratios per T."""
    base = {r["T"]: r for r in rows if r[key] == baseline}
    for r in rows:
        b = base.get(r["T"])
        r["speed_vs_base"] = b["ms"] / r["ms"] if b and r["ms"] else None
        r["mem_vs_base"] = r["mem"] / b["mem"] if b and r["mem"] is not None and b["mem"] else None


def _fmt(value: Any, column: str) -> str:
    if value is None:
        return "-"
    if column in ("mem",):
        return f"{value / MiB:.1f}"
    if column in ("speed_vs_base", "mem_vs_base", "growth"):
        return f"{value:.2f}x"
    if column == "max_err":
        return f"{value:.1e}"
    if isinstance(value, float):
        return f"{value:.3g}" if value < 10 else f"{value:.1f}"
    return str(value)


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """Rows of dicts as a plain-text table (Markdown-compatible) with the given columns."""
    headers = [{"mem": "mem MiB"}.get(c, c) for c in columns]
    cells = [[_fmt(r.get(c), c) for c in columns] for r in rows]
    widths = [max(len(h), *(len(row[i]) for row in cells)) for i, h in enumerate(headers)]
    line = lambda values: "| " + " | ".join(v.rjust(w) for v, w in zip(values, widths)) + " |"  # noqa: E731
    out = [line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(row) for row in cells]
    return "\n".join(out)


def _targets(sweep: list[dict[str, Any]], modules: list[dict[str, Any]]) -> str:
    lines = []
    fused = [r for r in modules if r["module"] == "MultiHeadAttention(fused)" and r["T"] == 1024]
    if fused:
        s = fused[0]["speed_vs_base"]
        lines.append(
            f"MultiHeadAttention(fused) speed vs nn.MultiheadAttention (SDPA) at T=1024: {s:.2f}x "
            f"(target >= 0.95x): {'PASS' if s >= 0.95 else 'FAIL'}"
        )
    T_max = max((r["T"] for r in sweep), default=None)
    by = {r["path"]: r for r in sweep if r["T"] == T_max}
    if T_max and by.get("naive", {}).get("mem") and by.get("chunked", {}).get("mem") is not None:
        ratio = by["chunked"]["mem"] / by["naive"]["mem"]
        lines.append(
            f"chunked / naive peak memory at T={T_max}: {ratio:.3f} (target <= 0.125): "
            f"{'PASS' if ratio <= 0.125 else 'FAIL'}"
        )
    elif T_max:
        lines.append(f"chunked / naive peak memory at T={T_max}: naive path not measured")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, finishes in seconds")
    parser.add_argument("--device", default=None, help="cpu, cuda, ... (default: get_device())")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-len", type=int, default=8192, help="longest T of the path sweep")
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--chunk-size", type=int, default=256)
    parser.add_argument("--naive-max-gib", type=float, default=4.0, help="skip naive above this")
    parser.add_argument("--no-causal", action="store_true", help="full instead of causal attention")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads (1 is steadier on a busy box)"
    )
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = get_device(args.device)
    causal = not args.no_causal
    torch.manual_seed(0)

    if args.quick:
        lengths, mha_lengths, three_lengths = [64, 128], [64, 128], [32, 64]
        sizes = dict(batch=1, heads=2, head_dim=16, chunk_size=32)
        mha_sizes, three_sizes, repeats = dict(batch=1, embed_dim=32, heads=2), dict(channels=16), 1
    else:
        lengths = [2**p for p in range(7, int(math.log2(args.max_len)) + 1)]  # 128 ... 8192
        mha_lengths, three_lengths = [256, 1024], [2**p for p in range(6, 13)]  # 64 ... 4096
        sizes = dict(batch=1, heads=args.heads, head_dim=64, chunk_size=args.chunk_size)
        mha_sizes, three_sizes, repeats = dict(batch=2, embed_dim=256, heads=4), {}, args.repeats

    threads = torch.get_num_threads()
    print(f"device: {device}, torch {torch.__version__}, {threads} CPU threads, float32")
    print(f"\n## Attention paths, forward+backward, {'causal' if causal else 'full'} attention")
    print(f"B={sizes['batch']}, H={sizes['heads']}, D={sizes['head_dim']}, "
          f"chunk={sizes['chunk_size']}; ratios against SDPA at the same T")  # fmt: skip
    sweep = attention_sweep(
        lengths=lengths,
        repeats=repeats,
        causal=causal,
        naive_max_bytes=args.naive_max_gib * 2**30,
        device=device,
        progress=True,
        **sizes,
    )
    cols = ["path", "T", "ms", "speed_vs_base", "mem", "mem_vs_base", "max_err", "note"]
    print(format_table(sweep, cols))

    print(f"\n## Multi-head attention modules, forward+backward, {mha_sizes}")
    modules = mha_comparison(
        lengths=mha_lengths, repeats=max(repeats, 7), causal=causal, device=device, progress=True,
        **mha_sizes,
    )  # fmt: skip
    print(format_table(modules, ["module", "T", "ms", "speed_vs_base", "mem", "max_err"]))

    print("\n## Three ways of processing sequences, forward+backward, batch 4")
    three = three_ways(lengths=three_lengths, repeats=repeats, device=device, progress=True,
                       **three_sizes)  # fmt: skip
    cols3 = ["model", "params", "sequential steps", "T", "ms_per_seq", "growth", "mem"]
    print(format_table(three, cols3))

    print("\n## Targets")
    print(_targets(sweep, modules))


if __name__ == "__main__":
    main()
