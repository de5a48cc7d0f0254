"""KV cache: generation with cached keys/values vs recomputing the whole prefix at every step.

Greedy generation of 256 new tokens after a 16-token prompt with a small GPT-2-shaped model
(GPT-2's 1024 positions, 4 layers of width 256 and an 8192-token vocabulary, the size of a small
BPE, so that the uncached baseline runs in seconds on a CPU). Both paths compute logits for the
last position only. With GPT-2's full 50257-token vocabulary the output projection, which both
paths pay once per token, dominates the cached step and hides part of the gain (``--vocab 50257``).
The table reports the median wall time of several runs and the speed-up of the cache, measured in
the same run; the generated tokens of both paths are checked to be identical.

    .venv/bin/python benchmarks/kv_cache.py [--threads 1] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time

import torch

from course_lib.gpu import count_parameters, time_fn
from course_lib.models import create


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--vocab", type=int, default=8192, help="vocabulary size")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    sizes = dict(n_layer=4, n_embd=256, n_head=4, vocab_size=args.vocab)
    model = create("gpt2", **sizes).eval()
    print(
        f"model: gpt2 preset with {sizes} "
        f"({count_parameters(model) / 1e6:.1f}M parameters), CPU, {args.threads} thread(s)"
    )

    rows = []
    for B in args.batch_sizes:
        prompt = torch.randint(model.config.vocab_size, (B, args.prompt))

        def run(use_cache: bool, prompt=prompt, n=args.new_tokens) -> torch.Tensor:
            return model.generate(prompt, n, greedy=True, use_cache=use_cache)

        assert torch.equal(run(True, n=32), run(False, n=32)), "cached != uncached generation"
        wall, cpu = {}, {}
        for use_cache in (False, True):
            cpu_start = time.process_time()
            timing = time_fn(lambda u=use_cache: run(u), repeats=args.repeats, warmup=0)
            wall[use_cache] = timing["median_ms"]
            cpu[use_cache] = (time.process_time() - cpu_start) * 1e3 / args.repeats
        rows.append((B, wall, cpu))

    print(f"\nGreedy generation of {args.new_tokens} tokens after a {args.prompt}-token prompt")
    print("| batch | no cache (ms) | KV cache (ms) | speed-up | CPU-time speed-up | cached tok/s |")
    print("|------:|--------------:|--------------:|---------:|------------------:|-------------:|")
    for B, wall, cpu in rows:
        tokens_per_s = B * args.new_tokens / (wall[True] / 1e3)
        print(
            f"| {B:5d} | {wall[False]:13.0f} | {wall[True]:13.0f} | "
            f"{wall[False] / wall[True]:7.1f}x | {cpu[False] / cpu[True]:16.1f}x | "
            f"{tokens_per_s:12.0f} |"
        )
    print("(wall: median of runs; CPU time: this process, mean of runs, robust to a busy machine)")


if __name__ == "__main__":
    main()
