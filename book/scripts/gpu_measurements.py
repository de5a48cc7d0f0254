"""Measure on a GPU what the book's GPU appendix plots, and store it as data.

The book is built on CPUs; its appendix (``book/chapters/06_appendix_gpu/``) draws this build's
own measurements and, beside them, the GPU measurements stored in
``book/data/gpu_measurements.json``, labelled with the device and the date they were taken on.
This script writes that file, on a machine with an NVIDIA GPU:

    python book/scripts/gpu_measurements.py                     # -> book/data/gpu_measurements.json
    python book/scripts/gpu_measurements.py --out /tmp/m.json --allow-cpu --quick   # try the format

The measurements are those of the appendix's pages, at larger sizes: matrix-product time
(float32 and bfloat16) and one forward and backward pass of causal attention (naive, chunked and
fused paths; time and peak memory).
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path

import torch
import torch.nn.functional as F

from course_lib import attention, gpu

OUT = Path(__file__).resolve().parent.parent / "data" / "gpu_measurements.json"
PATHS = {
    "naive": lambda q, k, v: attention.scaled_dot_product_attention(
        q, k, v, attention.causal_mask(q.shape[-2], device=q.device)
    ),
    "chunked": lambda q, k, v: attention.chunked_attention(q, k, v, causal=True, chunk_size=256),
    "fused": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
}


def matmul(device: torch.device, sizes: list[int], dtype: torch.dtype) -> dict:
    times = []
    for n in sizes:
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        times.append(gpu.time_fn(lambda a=a, b=b: a @ b, repeats=10, device=device)["min_ms"])
    return {"dtype": str(dtype).replace("torch.", ""), "n": sizes, "ms": times}


def attention_paths(device: torch.device, lengths: list[int]) -> dict:
    result = {name: {"ms": [], "peak_mib": []} for name in PATHS}
    for T in lengths:
        q, k, v = (torch.randn(1, 2, T, 64, device=device, requires_grad=True) for _ in range(3))
        for name, fn in PATHS.items():

            def step(fn=fn, q=q, k=k, v=v):
                fn(q, k, v).sum().backward()

            result[name]["ms"].append(gpu.time_fn(step, repeats=5, device=device)["min_ms"])
            result[name]["peak_mib"].append(gpu.peak_memory(step, device=device) / 2**20)
    return {"T": lengths, "paths": result}


def measure(device: torch.device, quick: bool = False) -> dict:
    sizes = [128, 256] if quick else [128, 256, 512, 1024, 2048, 4096]
    lengths = [128, 256] if quick else [512, 1024, 2048, 4096, 8192]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type.upper()
    dtypes = [torch.float32] + ([torch.bfloat16] if device.type == "cuda" else [])
    return {
        "device": name,
        "date": datetime.date.today().isoformat(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "matmul": [matmul(device, sizes, dtype) for dtype in dtypes],
        "attention": attention_paths(device, lengths),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--allow-cpu", action="store_true", help="measure a CPU (format check)")
    parser.add_argument("--quick", action="store_true", help="small sizes only")
    args = parser.parse_args(argv)
    if torch.cuda.is_available():
        device = torch.device("cuda")
    elif args.allow_cpu:
        device = torch.device("cpu")
    else:
        print("no CUDA GPU here: nothing stored (the book's GPU figures need a GPU's numbers)")
        return 1
    data = measure(device, quick=args.quick)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"{data['device']}, {data['date']}: written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
