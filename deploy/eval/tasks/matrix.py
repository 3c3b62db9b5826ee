#!/usr/bin/env python3
"""The task matrix of EVALUATION.md from `deploy/eval/mixed`'s results (standard library only).

For each task, joins the run with the CommonsenseQA-only router (and every baseline,
`TASK-cqa-router/`) with every other router's run (`TASK-WHICH-router/`: `mixed`,
`engine-taught`, ...) by item id, renames their router runs `cqa-router@R`, `WHICH-router@R`,
and prints accuracy, share of tokens escalated and gap recovered with its paired bootstrap
95 % interval (items resampled, all runs kept together).

    deploy/eval/tasks/matrix.py $DUET_HOME/eval/mixed cqa humaneval bigbench:date_understanding
"""
import json
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from table import gap_interval, load, summarise  # noqa: E402


def router_runs(out, name):
    """Every `{name}-{which}-router` run under `out` but the baseline one: `{which}` names the
    router (mixed, engine-taught, ...), in a stable order."""
    prefix, suffix = f"{name}-", "-router"
    return sorted(
        d[len(prefix):-len(suffix)]
        for d in os.listdir(out)
        if d.startswith(prefix) and d.endswith(suffix) and d != f"{name}-cqa-router"
        and os.path.exists(os.path.join(out, d, "items.jsonl"))
    )


def by_id(path):
    return {i["id"]: i for i in load(path)} if os.path.exists(path) else {}


def joined(out, task):
    name = task.replace(":", "-").replace("/", "-")
    base = by_id(os.path.join(out, f"{name}-cqa-router", "items.jsonl"))
    others = {w: by_id(os.path.join(out, f"{name}-{w}-router", "items.jsonl")) for w in router_runs(out, name)}
    items = []
    for id_, item in base.items():
        runs = []
        for r in item["runs"]:
            if r["run"].startswith("router@"):
                r = dict(r, run="cqa-router@" + r["run"].split("@", 1)[1])
            runs.append(r)
        for which, other in others.items():
            for r in other.get(id_, {}).get("runs", []):
                if r["run"].startswith("router@"):
                    runs.append(dict(r, run=f"{which}-router@" + r["run"].split("@", 1)[1]))
        items.append({"id": id_, "runs": runs})
    # Paired comparisons need every run on every item: keep the items all runs reached (a run
    # still going, or resumed with fewer items, would otherwise be compared on other items).
    names = {r["run"] for i in items for r in i["runs"]}
    return [i for i in items if {r["run"] for r in i["runs"]} == names]


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out, tasks = sys.argv[1], sys.argv[2:]
    print("| task | items | run | accuracy | tokens escalated | gap recovered (95 % interval) |")
    print("|---|---|---|---|---|---|")
    for task in tasks:
        items = joined(out, task)
        if not items:
            print(f"| {task} | 0 | (no results) | | | |")
            continue
        runs = summarise(items)
        for name in sorted(runs, key=lambda k: runs[k]["share"]):
            s = runs[name]
            gap = "-"
            if not math.isnan(s["gap"]) and name not in ("slm-only", "llm-only"):
                lo, hi = gap_interval(items, name)
                gap = f"{100 * s['gap']:.0f} % ({100 * lo:.0f} to {100 * hi:.0f} %)"
            print(f"| {task} | {s['items']} | {name} | {100 * s['accuracy']:.1f} % | {100 * s['share']:.1f} % | {gap} |")


if __name__ == "__main__":
    main()
