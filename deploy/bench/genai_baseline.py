#!/usr/bin/env python3
"""Baseline for `edge-node bench`: the same ONNX model run by onnxruntime-genai (Microsoft's C++
generation loop over the same ONNX Runtime), same prompt lengths, same greedy decoding.

Prints one JSON object shaped like `edge-node bench`'s report.
"""
import argparse
import json
import os
import resource
import statistics
import time

import onnxruntime_genai as og

ap = argparse.ArgumentParser()
ap.add_argument("model_dir")
ap.add_argument("--prefill-tokens", type=int, default=256)
ap.add_argument("--decode-tokens", type=int, default=64)
ap.add_argument("--contexts", default="128,1024")
ap.add_argument("--repeat", type=int, default=3)
ap.add_argument("--threads", type=int, default=os.cpu_count())
args = ap.parse_args()

config = og.Config(args.model_dir)
config.overlay(json.dumps({"model": {"decoder": {"session_options": {"intra_op_num_threads": args.threads}}}}))
model = og.Model(config)
tok = og.Tokenizer(model)
base = list(tok.encode(
    "The quick brown fox jumps over the lazy dog. def fibonacci(n):\n    if n < 2:\n        return n\n    "
    "return fibonacci(n - 1) + fibonacci(n - 2)\nPack my box with five dozen liquor jugs; 0123456789.\n"))


def filler(n):
    return [base[i % len(base)] for i in range(n)]


def new_gen(max_length):
    p = og.GeneratorParams(model)
    p.set_search_options(max_length=max_length, do_sample=False)
    return og.Generator(model, p)


contexts = [int(c) for c in args.contexts.split(",")]
need = max(contexts + [args.prefill_tokens]) + args.decode_tokens + 2

g = new_gen(64)
g.append_tokens(filler(32))
for _ in range(4):
    g.generate_next_token()
del g
# The first run of each input length plans and allocates its memory: warm up every timed
# length once, as `edge-node bench` does.
for n in [args.prefill_tokens] + contexts:
    g = new_gen(need)
    g.append_tokens(filler(max(n, 1)))
    del g

prefill = []
for _ in range(args.repeat):
    g = new_gen(need)
    t = time.perf_counter()
    g.append_tokens(filler(args.prefill_tokens))
    prefill.append((time.perf_counter() - t) * 1e3)
    del g

decode = []
for ctx in contexts:
    runs = []
    for _ in range(args.repeat):
        g = new_gen(need)
        g.append_tokens(filler(ctx))
        # append_tokens already ran the model over the context and kept its logits, so the
        # first generate_next_token only picks a token from them and runs nothing. Take that
        # pick outside the timer: each timed call then runs the model once, as each timed step
        # of `edge-node bench` does (counting it would time decode_tokens - 1 runs as
        # decode_tokens tokens, a 1/decode_tokens bias in genai's favour).
        g.generate_next_token()
        t = time.perf_counter()
        for _ in range(args.decode_tokens):
            g.generate_next_token()
        runs.append((time.perf_counter() - t) * 1e3 / args.decode_tokens)
        del g
    ms = statistics.median(runs)
    decode.append({"context": ctx, "ms_per_token": ms, "tokens_per_s": 1e3 / ms, "runs_ms_per_token": runs})

print(json.dumps({
    "model": os.path.basename(os.path.normpath(args.model_dir)),
    "runner": f"onnxruntime-genai {og.__version__}",
    "threads": args.threads,
    "prefill_tokens": args.prefill_tokens,
    "prefill_ms": statistics.median(prefill),
    "prefill_runs_ms": prefill,
    "decode": decode,
    "context_growth_ratio": decode[-1]["ms_per_token"] / decode[0]["ms_per_token"],
    "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
}, indent=2))
