"""KV cache: generation with cached keys/values vs recomputing the whole prefix at every step.

Greedy generation of 256 new tokens after a 16-token prompt with a small GPT-2-shaped model
(GPT-2's vocabulary and 1024 positions, fewer and narrower layers so the uncached baseline runs in
seconds on a CPU). Both paths compute logits for the last position only; the table reports the
median wall time of several runs and the speed-up of the cache, measured in the same run. The
generated tokens of both paths are checked to be identical.

    .venv/bin/python benchmarks/kv_cache.py [--threads 1] [--repeats 3]
"""

from __future__ import annotations

import argparse

import torch

from course_lib.gpu import count_parameters, time_fn
from course_lib.models import create


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = create("gpt2", n_layer=4, n_embd=256, n_head=4).eval()
    print(
        f"model: gpt2 preset with n_layer=4, n_embd=256, n_head=4 "
        f"({count_parameters(model) / 1e6:.1f}M parameters), CPU, {args.threads} thread(s)"
    )

    rows = []
    for B in args.batch_sizes:
        prompt = torch.randint(model.config.vocab_size, (B, args.prompt))

        def run(use_cache: bool, prompt=prompt, n=args.new_tokens) -> torch.Tensor:
            return model.generate(prompt, n, greedy=True, use_cache=use_cache)

        assert torch.equal(run(True, n=32), run(False, n=32)), "cached != uncached generation"
        times = {
            use_cache: time_fn(lambda u=use_cache: run(u), repeats=args.repeats, warmup=0)[
                "median_ms"
            ]
            for use_cache in (False, True)
        }
        rows.append((B, times[False], times[True]))

    print(f"\nGreedy generation of {args.new_tokens} tokens after a {args.prompt}-token prompt")
    print("| batch | no cache (ms) | KV cache (ms) | cached tokens/s | speed-up |")
    print("|------:|--------------:|--------------:|----------------:|---------:|")
    for B, slow, fast in rows:
        tokens_per_s = B * args.new_tokens / (fast / 1e3)
        print(
            f"| {B:5d} | {slow:13.0f} | {fast:13.0f} | {tokens_per_s:15.0f} | {slow / fast:7.1f}x |"
        )


if __name__ == "__main__":
    main()
