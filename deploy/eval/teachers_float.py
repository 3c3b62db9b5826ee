#!/usr/bin/env python3
"""Which teacher is right where the in-process ONNX LLM and llama-server disagree?

`router-lab compare-teachers --choices FILE` writes, per item, the token sequence it
teacher-forced and both teachers' greedy choices at every position. Both LLMs come from the
same Q4_K_M GGUF: llama.cpp computes with its Q4_K_M weights directly, while the ONNX model was
dequantized to an HF checkpoint and quantized again to int4 `MatMulNBits` blocks. This script
runs the GGUF's weights dequantized to float32 (transformers, as `deploy/models/prepare` loads
them before conversion) over the same sequences, one forward per item, and reports how often
each teacher picks the float model's argmax, overall and where they disagree, with the float
model's own margin (best minus second-best log-probability) there.

Needs the prepare venv (torch, transformers, gguf, accelerate):

    $DUET_HOME/venv/bin/python deploy/eval/teachers_float.py choices.jsonl \
        [--gguf $DUET_HOME/gguf/qwen2.5-coder-1.5b-instruct.gguf]
"""
import argparse
import json
import os
import sys


def main():
    home = os.environ.get("DUET_HOME", os.path.expanduser("~/.cache/duet"))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("choices", help="compare-teachers --choices output (JSON lines)")
    ap.add_argument("--gguf", default=os.path.join(home, "gguf", "qwen2.5-coder-1.5b-instruct.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    transformers.utils.logging.disable_progress_bar()

    torch.set_num_threads(args.threads)
    model = AutoModelForCausalLM.from_pretrained(os.path.dirname(args.gguf), gguf_file=os.path.basename(args.gguf), dtype=torch.float32)
    model.eval()
    rows = [json.loads(line) for line in open(args.choices, encoding="utf-8") if line.strip()]
    n = agree_onnx = agree_engine = 0
    disagreements = []
    with torch.no_grad():
        for row in rows:
            tokens, first = row["tokens"], row["first"]
            logits = model(torch.tensor([tokens])).logits[0].float()
            logprobs = torch.log_softmax(logits, dim=-1)
            for k, (a, b) in enumerate(zip(row["in_process"], row["engine"])):
                top = torch.topk(logprobs[first + k - 1], 2)
                best = int(top.indices[0])
                n += 1
                agree_onnx += best == a
                agree_engine += best == b
                if a != b:
                    disagreements.append({
                        "item": row["id"], "position": first + k, "float": best, "in_process": a, "engine": b,
                        "float_margin": float(top.values[0] - top.values[1]),
                        "float_gap_to_in_process": float(logprobs[first + k - 1][best] - logprobs[first + k - 1][a]),
                    })
    margins = sorted(d["float_margin"] for d in disagreements)
    report = {
        "positions": n,
        "float_agrees_with_in_process_onnx": agree_onnx / max(n, 1),
        "float_agrees_with_llama_server": agree_engine / max(n, 1),
        "disagreements": len(disagreements),
        "at_disagreements_float_sides_with_in_process": sum(d["float"] == d["in_process"] for d in disagreements),
        "at_disagreements_float_sides_with_llama_server": sum(d["float"] == d["engine"] for d in disagreements),
        "at_disagreements_float_margin_median": margins[len(margins) // 2] if margins else None,
        "at_disagreements_float_margin_under_0.5": sum(m < 0.5 for m in margins),
    }
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
