#!/usr/bin/env python3
"""Where a prefill's time goes inside ONNX Runtime, by operator, and what splitting it costs.

`perf` (slm_prefill_profile.sh) shows both runners spend a prefill in the same kernels of the
same library. This asks ONNX Runtime itself, on the same files and threads: its own profiler
gives each operator's time in one prefill of TOKENS tokens (and each matrix multiply's rate
in integer operations per second), then the same prompt is run whole and in chunks of CHUNKS
tokens on a growing cache, to see whether shorter runs would be faster and whether they give
the same last-token logits. Plain `onnxruntime` (the wheel whose library both runners load),
not either runner: the kernels are the question, not the loop around them.

    $DUET_HOME/venv/bin/python deploy/bench/slm_prefill_ops.py [MODEL_DIR] [--tokens 256]
        [--threads 2] [--chunks 256,128,64,32] [--repeat 5]

Prints markdown tables.
"""
import argparse
import collections
import json
import os
import statistics
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort

home = os.environ.get("DUET_HOME", os.path.expanduser("~/.cache/duet"))
ap = argparse.ArgumentParser()
ap.add_argument("model_dir", nargs="?", default=f"{home}/models/qwen2.5-coder-0.5b-instruct")
ap.add_argument("--tokens", type=int, default=256)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--chunks", default="256,128,64,32")
ap.add_argument("--repeat", type=int, default=5)
args = ap.parse_args()
cfg = json.load(open(f"{args.model_dir}/genai_config.json"))["model"]["decoder"]
layers, kv_heads, head = cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["head_size"]
ids = np.array([[(i * 7919) % 150000 for i in range(args.tokens)]], dtype=np.int64)


def projection(node_name):
    """The projection a MatMulNBits node computes, the same in every layer: `/model/layers.3/mlp/
    gate_proj/MatMul_Q4` is `gate_proj`, `/lm_head/MatMul_Q4` is `lm_head`."""
    parts = node_name.split("/")
    return parts[4] if len(parts) > 5 else parts[1]


def session(profile_dir=None):
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    if profile_dir:
        so.enable_profiling = True
        so.profile_file_prefix = f"{profile_dir}/prefill"
    return ort.InferenceSession(f"{args.model_dir}/model.onnx", so, providers=["CPUExecutionProvider"])


def empty_past():
    z = np.zeros((1, kv_heads, 0, head), np.float32)
    return {f"past_key_values.{l}.{kv}": z for l in range(layers) for kv in ("key", "value")}


def prefill(s, chunk):
    """The prompt in runs of `chunk` tokens on a growing cache; the last token's logits."""
    past, done, names = empty_past(), 0, [o.name for o in s.get_outputs()]
    while done < args.tokens:
        part = ids[:, done:done + chunk]
        done += part.shape[1]
        out = dict(zip(names, s.run(None, {"input_ids": part, "attention_mask": np.ones((1, done), np.int64), **past})))
        past = {f"past_key_values.{l}.{kv}": out[f"present.{l}.{kv}"] for l in range(layers) for kv in ("key", "value")}
    return out["logits"][0, -1]


# 1. ONNX Runtime's profiler: the last of a few whole prefills, by operator.
with tempfile.TemporaryDirectory() as tmp:
    s = session(tmp)
    for _ in range(3):
        prefill(s, args.tokens)
    events = json.load(open(s.end_profiling()))
last = [e for e in events if e.get("name") == "model_run"][-1]
start, end = last["ts"], last["ts"] + last["dur"]
nodes = [e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and start <= e["ts"] <= end]
by_op, by_matmul = collections.Counter(), collections.Counter()
for e in nodes:
    by_op[e["args"]["op_name"]] += e["dur"]
    if e["args"]["op_name"] == "MatMulNBits":
        by_matmul[projection(e["name"].removesuffix("_kernel_time"))] += e["dur"]
total = sum(by_op.values())
print(f"{os.path.basename(args.model_dir)}, {args.tokens}-token prefill, {args.threads} threads, "
      f"onnxruntime {ort.__version__}; run {last['dur'] / 1e3:.0f} ms")
print("\n| operator | ms | share |\n|---|---|---|")
for op, us in by_op.most_common():
    if us >= 100:
        print(f"| {op} | {us / 1e3:.1f} | {100 * us / total:.1f} % |")
shapes = {}
graph = onnx.load(f"{args.model_dir}/model.onnx", load_external_data=False).graph
for n in graph.node:
    if n.op_type == "MatMulNBits":
        a = {x.name: onnx.helper.get_attribute_value(x) for x in n.attribute}
        shapes[projection(n.name)] = shapes.get(projection(n.name), 0) + a["K"] * a["N"]
print("\n| matrix multiply (all layers) | ms | rate (G int ops/s) |\n|---|---|---|")
for key, us in by_matmul.most_common():
    rows = 1 if key == "lm_head" else args.tokens  # the graph runs the head on the last position only
    macs = shapes.get(key, 0) * rows
    print(f"| {key} | {us / 1e3:.1f} | {2 * macs / (us / 1e6) / 1e9:.0f} |")

# 2. Whole against chunked, alternated so that drift in the host's speed weighs on each alike.
s = session()
chunks = [int(c) for c in args.chunks.split(",")]
reference = prefill(s, args.tokens)
times = {c: [] for c in chunks}
same = {}
for c in chunks:
    same[c] = bool(np.array_equal(prefill(s, c), reference))
for _ in range(args.repeat):
    for c in chunks:
        t = time.perf_counter()
        prefill(s, c)
        times[c].append((time.perf_counter() - t) * 1e3)
base = statistics.median(times[chunks[0]])
print(f"\n| runs of | prefill ms (median of {args.repeat}) | against {chunks[0]} | last logits bit-equal |\n|---|---|---|---|")
for c in chunks:
    m = statistics.median(times[c])
    print(f"| {c} | {m:.0f} | {m / base:.2f} | {'yes' if same[c] else 'no'} |")
