#!/usr/bin/env python3
"""Markdown tables for EVALUATION.md from an eval-cqa `items.jsonl`.

The full-set run reuses the sweep's first items, on which the operating point was chosen, so
besides the whole set this also prints the figures on the items after them (never used for
any choice). Standard library only.

    deploy/eval/table.py $DUET_HOME/eval/full-all-0.1/items.jsonl --skip 100
    deploy/eval/table.py $DUET_HOME/eval/served-100-0.1-longdeadline/items.jsonl \
        --same-as $DUET_HOME/eval/sweep/items.jsonl --run router@0.100
    deploy/eval/table.py new/items.jsonl --same-runs old/items.jsonl   # every run, by name
"""
import argparse
import json
import math
import random
import sys


def load(path):
    items = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                items.append(json.loads(line))
            except json.JSONDecodeError as e:  # a torn last line of an interrupted run
                print(f"{path}:{n}: skipped ({e})", file=sys.stderr)
    return items


def summarise(items):
    runs = {}
    for item in items:
        for r in item["runs"]:
            s = runs.setdefault(r["run"], {"items": 0, "correct": 0, "tokens": 0, "escalated": 0, "no_answer": 0})
            s["items"] += 1
            s["correct"] += bool(r["correct"])
            s["tokens"] += r["tokens"]
            s["escalated"] += r["escalated"]
            s["no_answer"] += r["answer"] is None
    for s in runs.values():
        p = s["correct"] / s["items"] if s["items"] else 0.0
        s["accuracy"] = p
        s["ci95"] = 1.96 * math.sqrt(p * (1 - p) / s["items"]) if s["items"] else 0.0
        s["share"] = s["escalated"] / s["tokens"] if s["tokens"] else 0.0
    slm, llm = runs.get("slm-only"), runs.get("llm-only")
    for s in runs.values():
        gap = (llm["accuracy"] - slm["accuracy"]) if slm and llm else 0.0
        s["gap"] = (s["accuracy"] - slm["accuracy"]) / gap if gap > 0 else float("nan")
    return runs


def gap_interval(items, run, resamples=2000, seed=7):
    """Paired bootstrap (items resampled, every run kept together) 95 % interval of the gap
    recovered, so a claim like "at least 60 % of the gap" comes with its uncertainty."""
    rng = random.Random(seed)
    rows = []
    for item in items:
        c = {r["run"]: bool(r["correct"]) for r in item["runs"]}
        if run in c and "slm-only" in c and "llm-only" in c:
            rows.append((c["slm-only"], c[run], c["llm-only"]))
    if not rows:
        return float("nan"), float("nan")
    gaps = []
    for _ in range(resamples):
        sample = [rows[rng.randrange(len(rows))] for _ in rows]
        slm, mid, llm = (sum(x[i] for x in sample) for i in range(3))
        if llm > slm:
            gaps.append((mid - slm) / (llm - slm))
    gaps.sort()
    return gaps[int(0.025 * len(gaps))], gaps[int(0.975 * len(gaps)) - 1]


def table(runs):
    order = sorted(runs, key=lambda k: runs[k]["share"])
    out = ["| run | items | accuracy | +-95% | tokens escalated | gap recovered | no answer |",
           "|---|---|---|---|---|---|---|"]
    for k in order:
        s = runs[k]
        name = k if k in ("slm-only", "llm-only") else f"**{k}**"
        gap = "-" if math.isnan(s["gap"]) else f"{100 * s['gap']:.0f} %"
        out.append(f"| {name} | {s['items']} | {100 * s['accuracy']:.1f} % | {100 * s['ci95']:.1f} | "
                   f"{100 * s['share']:.2f} % | {gap} | {s['no_answer']} |")
    return "\n".join(out)


def compare(items, reference, run):
    """How many served answers equal the in-process run's, token for token and by answer."""
    ref = {}
    for item in reference:
        for r in item["runs"]:
            if r["run"] == run:
                ref[item["id"]] = r
    n = same_text = same_answer = 0
    flips = {"right->wrong": 0, "wrong->right": 0}
    for item in items:
        r, other = item["runs"][0], ref.get(item["id"])
        if other is None:
            continue
        n += 1
        same_text += r["text"] == other["text"]
        same_answer += r["answer"] == other["answer"]
        if r["correct"] != other["correct"]:
            flips["wrong->right" if r["correct"] else "right->wrong"] += 1
    print(f"\nagainst in-process {run} on the same {n} items: {same_text} texts identical token for "
          f"token, {same_answer} answers identical; correctness changed: {flips}")


def compare_runs(items, reference):
    """Every run of `items` against the run of the same name in `reference`, token for token."""
    ref = {(item["id"], r["run"]): r for item in reference for r in item["runs"]}
    per_run = {}
    for item in items:
        for r in item["runs"]:
            other = ref.get((item["id"], r["run"]))
            if other is None:
                continue
            s = per_run.setdefault(r["run"], {"n": 0, "text": 0, "escalated": 0, "differ": []})
            s["n"] += 1
            s["text"] += r["text"] == other["text"]
            s["escalated"] += r["escalated"] == other["escalated"]
            if r["text"] != other["text"]:
                s["differ"].append(item["id"])
    print("| run | items | identical texts | identical escalation counts | items that differ |")
    print("|---|---|---|---|---|")
    for run, s in per_run.items():
        print(f"| {run} | {s['n']} | {s['text']} | {s['escalated']} | {' '.join(s['differ']) or '-'} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("items", help="items.jsonl written by `router-lab eval-cqa`")
    ap.add_argument("--skip", type=int, default=100, help="items the operating point was chosen on")
    ap.add_argument("--same-as", help="items.jsonl of an in-process run to compare the first run with")
    ap.add_argument("--run", default="router@0.100", help="the run of --same-as to compare with")
    ap.add_argument("--same-runs", help="items.jsonl of another in-process run: compare every run by name")
    a = ap.parse_args()
    items = load(a.items)
    if a.same_runs:
        compare_runs(items, load(a.same_runs))
        return
    if a.same_as:
        print(table(summarise(items)))
        compare(items, load(a.same_as), a.run)
        return
    print(f"All {len(items)} items:\n")
    print(table(summarise(items)))
    rest = items[a.skip:]
    if rest:
        print(f"\nThe {len(rest)} items after the first {a.skip}:\n")
        print(table(summarise(rest)))
        print(f"\nThe first {a.skip}:\n")
        print(table(summarise(items[: a.skip])))
    for name, part in (("all", items), (f"after the first {a.skip}", rest)):
        for run in sorted({r["run"] for i in part for r in i["runs"]} - {"slm-only", "llm-only"}):
            lo, hi = gap_interval(part, run)
            print(f"\n{run}, {name}: gap recovered 95 % bootstrap interval {100 * lo:.0f}-{100 * hi:.0f} %")


if __name__ == "__main__":
    main()
