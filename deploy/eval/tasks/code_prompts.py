#!/usr/bin/env python3
"""Code prompts for router training, from the Python standard library (no download).

HumanEval problems 0-81 are the code evaluation and 82-163 are kept back, so the router's code
training prompts come from elsewhere: the documented top-level functions of pure-Python
standard library modules (MODULES), each turned into a HumanEval-shaped prompt (signature and
docstring, no body; not the module's import, so that the answer is not a call of the original). The SLM writes its own answer to each; the labels come
from the LLM's choice at every position of that answer, so no tests are needed.

    code_prompts.py OUT.jsonl     # one {"task_id","prompt","entry_point"} per function, sorted

The selection is deterministic for a given Python version (recorded in each task id's source
line); functions whose docstring is under 40 characters or that take *args/**kwargs only are
skipped, and so are docstrings over 1,200 characters.
"""
import ast
import json
import os
import sys
import sysconfig

MODULES = [
    "base64", "bisect", "calendar", "colorsys", "csv", "difflib", "filecmp", "fnmatch",
    "fractions", "ftplib", "genericpath", "glob", "gzip", "heapq", "html", "imghdr", "ipaddress",
    "keyword", "linecache", "mimetypes", "netrc", "ntpath", "opcode", "operator", "optparse",
    "os", "pathlib", "pickletools", "platform", "plistlib", "posixpath", "pprint", "quopri",
    "random", "re", "reprlib", "sched", "secrets", "shlex", "shutil", "smtplib", "statistics",
    "string", "stringprep", "tabnanny", "textwrap", "tokenize", "traceback", "urllib/parse",
    "uu", "uuid", "warnings", "wave", "weakref", "webbrowser", "zipfile",
]


def functions(path, module):
    tree = ast.parse(open(path, encoding="utf-8").read())
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
            continue
        doc = ast.get_docstring(node, clean=False)
        if not doc or not 40 <= len(doc.strip()) <= 1200:
            continue
        args = node.args
        if not (args.args or args.posonlyargs or args.kwonlyargs):
            continue
        stub = ast.FunctionDef(name=node.name, args=node.args, body=[ast.Pass()], decorator_list=[], returns=node.returns, type_comment=None)
        if sys.version_info >= (3, 12):
            stub.type_params = []
        ast.copy_location(stub, node)
        header = ast.unparse(stub).rsplit("\n", 1)[0]  # drop the `pass` line
        body_doc = '    """' + doc.replace('"""', "'''") + '"""\n'
        prompt = f"{header}\n{body_doc}"
        yield {"task_id": f"stdlib/{module.replace('/', '.')}.{node.name}", "prompt": prompt, "entry_point": node.name,
               "source": f"python {sys.version.split()[0]}"}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    stdlib = sysconfig.get_paths()["stdlib"]
    out = []
    for m in MODULES:
        path = os.path.join(stdlib, m + ".py")
        if os.path.exists(path):
            out.extend(functions(path, m))
    out.sort(key=lambda r: r["task_id"])
    tmp = sys.argv[1] + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for r in out:
            f.write(json.dumps(r) + "\n")
    os.replace(tmp, sys.argv[1])
    print(f"[tasks] {len(out)} standard-library code prompts -> {sys.argv[1]}", file=sys.stderr)


if __name__ == "__main__":
    main()
