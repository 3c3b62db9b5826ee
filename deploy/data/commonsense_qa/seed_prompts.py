#!/usr/bin/env python3
"""The first N CommonsenseQA validation questions as prompts in the seed's format (the format
the shipped router was trained on; router-lab's `cqa::prompt_for` builds the same text), one per
line: JSON `{"kind": "cqa", "prompt": ..., "router": []}` for the benchmark scripts, or with
`--text` the bare prompt of the first item (for `deploy/demo`).

Usage: seed_prompts.py N [--text]
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def prompt(item):
    s = "Question: " + item["question"] + "\nChoices:\n"
    s += "".join(f"{l}. {t}\n" for l, t in zip(item["choices"]["label"], item["choices"]["text"]))
    s += "\nPlease format your response in the following way:\n[Explanation]. Therefore, the answer is answer (label).\n"
    s += "Ensure the final sentence includes the answer followed by the label in parentheses.\n\nAnswer and Reasoning:"
    return s


def main():
    args = sys.argv[1:]
    if not args or not args[0].isdigit():
        sys.exit("usage: seed_prompts.py N [--text]")
    n, text = int(args[0]), "--text" in args[1:]
    with open(os.path.join(HERE, "validation.jsonl")) as f:
        items = [json.loads(line) for _, line in zip(range(n), f)]
    for item in items[:1] if text else items:
        print(prompt(item) if text else json.dumps({"kind": "cqa", "prompt": prompt(item), "router": []}))


if __name__ == "__main__":
    main()
