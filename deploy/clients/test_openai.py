"""`edge-node serve` as apps see it: the official `openai` Python client against the real 0.5B.

Starts the release binaries (built by deploy/test) on free loopback ports: one server with the
SLM alone, and one routed through a real `cloud-gateway` (embedded 1.5B). Run with the client
venv: `$(deploy/clients/setup) -m unittest discover -s deploy/clients -p 'test_*.py'`.
"""
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request
from pathlib import Path

import openai

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "target" / "release"
PROMPT = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
# A CommonsenseQA question: the shipped router is sure of every token of PROMPT's answer (its
# confidence rounds to 1.0 in f32, so no escalation rate reaches them) but not of this one's letter.
HARD = [{"role": "user", "content": "A revolving door is convenient for two direction travel, but it also serves as a "
                                    "security measure at a what? A. bank B. library C. department store D. mall "
                                    "E. new york. Answer with one letter."}]


def free_port(kind=socket.SOCK_STREAM):
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(proc, log, pattern, timeout=180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = Path(log).read_text(errors="replace")
        if re.search(pattern, text):
            return
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited early:\n{text}")
        time.sleep(0.2)
    raise RuntimeError(f"{proc.args[0]} not ready in {timeout}s:\n{Path(log).read_text(errors='replace')}")


class Process:
    """A child process with its output in a temporary log, killed on exit."""

    def __init__(self, args, ready):
        self.log = tempfile.NamedTemporaryFile(prefix="duet-", suffix=".log", delete=False)
        env = dict(os.environ)
        env.pop("DUET_MODEL", None)
        self.proc = subprocess.Popen([str(a) for a in args], stdout=self.log, stderr=subprocess.STDOUT, env=env)
        wait_for(self.proc, self.log.name, ready)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        os.unlink(self.log.name)


def metric(port, name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    m = re.search(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


class LocalServer(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.port = free_port()
        cls.server = Process([BIN / "edge-node", "serve", "--listen", f"127.0.0.1:{cls.port}", "--threads", "2"], r"serving the OpenAI API")
        cls.client = openai.OpenAI(base_url=f"http://127.0.0.1:{cls.port}/v1", api_key="unused", max_retries=0)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.server.stop()

    def test_models_lists_the_devices_slm(self):
        ids = [m.id for m in self.client.models.list().data]
        self.assertEqual(ids, ["qwen2.5-coder-0.5b-instruct"])

    def test_a_chat_completion_answers_with_usage(self):
        r = self.client.chat.completions.create(model="duet", messages=PROMPT, temperature=0, max_tokens=32)
        self.assertIn("Paris", r.choices[0].message.content)
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertGreater(r.usage.prompt_tokens, 10)
        self.assertGreater(r.usage.completion_tokens, 3)
        self.assertEqual(r.model_extra["duet"]["mode"], "local")

    def test_streamed_chunks_add_up_to_the_whole_answer(self):
        whole = self.client.chat.completions.create(model="duet", messages=PROMPT, temperature=0, max_tokens=32)
        chunks = list(self.client.chat.completions.create(model="duet", messages=PROMPT, temperature=0, max_tokens=32, stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        self.assertEqual(text, whole.choices[0].message.content)
        self.assertEqual(chunks[-1].choices[0].finish_reason, "stop")
        sources = {c.model_extra["duet"]["source"] for c in chunks if c.choices and c.choices[0].delta.content}
        self.assertEqual(sources, {"slm"})

    def test_text_completion_and_stop_sequences(self):
        r = self.client.completions.create(model="duet", prompt="def fibonacci(n):", temperature=0, max_tokens=48, stop=["return"])
        self.assertNotIn("return", r.choices[0].text)
        self.assertEqual(r.choices[0].finish_reason, "stop")
        r = self.client.completions.create(model="duet", prompt="def fibonacci(n):", temperature=0, max_tokens=4)
        self.assertEqual((r.choices[0].finish_reason, r.usage.completion_tokens), ("length", 4))

    def test_an_invalid_request_gets_a_clear_400(self):
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.chat.completions.create(model="duet", messages=[], max_tokens=4)
        self.assertIn("messages", str(e.exception))
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.chat.completions.create(model="duet", messages=PROMPT, temperature=-1)
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.chat.completions.create(model="duet", messages=PROMPT, extra_body={"duet": {"mode": "routed"}})
        self.assertIn("no gateway", str(e.exception))

    def test_a_client_that_leaves_a_stream_stops_its_generation(self):
        before = metric(self.port, "duet_edge_serve_requests_cancelled_total")
        tokens_before = metric(self.port, "duet_edge_serve_tokens_total")
        stream = self.client.chat.completions.create(
            model="duet", messages=[{"role": "user", "content": "Write a long story about a dragon."}], temperature=0, max_tokens=2000, stream=True)
        for i, _ in enumerate(stream):
            if i == 3:
                break
        stream.close()
        deadline = time.monotonic() + 30
        while metric(self.port, "duet_edge_serve_requests_cancelled_total") <= before and time.monotonic() < deadline:
            time.sleep(0.2)
        self.assertEqual(metric(self.port, "duet_edge_serve_requests_cancelled_total"), before + 1)
        self.assertLess(metric(self.port, "duet_edge_serve_tokens_total") - tokens_before, 200, "stopped long before max_tokens")


class BoundedQueue(unittest.TestCase):
    """One request runs and `--queue 1` more may wait: the next one is refused at once."""

    def test_a_request_beyond_the_queue_gets_429_at_once(self):
        port = free_port()
        server = Process([BIN / "edge-node", "serve", "--listen", f"127.0.0.1:{port}", "--threads", "2", "--queue", "1"], r"serving the OpenAI API")
        try:
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=300)
            long = [{"role": "user", "content": "Write a long story about a dragon."}]
            running = client.chat.completions.create(model="duet", messages=long, temperature=0, max_tokens=300, stream=True)
            next(iter(running))  # the worker is busy with it
            waiting = threading.Thread(target=lambda: client.chat.completions.create(model="duet", messages=PROMPT, temperature=0, max_tokens=2))
            waiting.start()
            deadline = time.monotonic() + 10
            while metric(port, "duet_edge_serve_queue_depth") < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            started = time.monotonic()
            with self.assertRaises(openai.RateLimitError):
                client.chat.completions.create(model="duet", messages=PROMPT, max_tokens=2)
            self.assertLess(time.monotonic() - started, 2.0, "refused at once, not after waiting")
            self.assertEqual(metric(port, "duet_edge_serve_requests_rejected_total"), 1)
            running.close()
            waiting.join(60)
        finally:
            server.stop()


class RoutedServer(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        cert = Path(cls.dir.name) / "gateway-cert.pem"
        quic = free_port(socket.SOCK_DGRAM)
        cls.gateway = Process([BIN / "cloud-gateway", "--listen", f"127.0.0.1:{quic}", "--http-listen", "off", "--write-cert", cert,
                               "--log", "warn"], r"ready on")
        cls.port = free_port()
        cls.server = Process([BIN / "edge-node", "serve", "--listen", f"127.0.0.1:{cls.port}", "--threads", "1", "--gateway",
                              f"127.0.0.1:{quic}", "--ca-cert", cert, "--deadline-min-ms", "60000", "--deadline-max-ms", "60000"],
                             r"serving the OpenAI API")
        cls.client = openai.OpenAI(base_url=f"http://127.0.0.1:{cls.port}/v1", api_key="unused", max_retries=0, timeout=300)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.server.stop()
        cls.gateway.stop()
        cls.dir.cleanup()

    def test_routed_usage_counts_escalated_tokens_answered_by_the_cloud(self):
        r = self.client.chat.completions.create(model="duet", messages=HARD, temperature=0, max_tokens=24, extra_body={"duet": {"escalation_rate": 0.5}})
        d = r.model_extra["duet"]
        self.assertEqual(d["mode"], "routed")
        self.assertGreater(d["escalated"], 0)
        self.assertEqual(d["cloud_tokens"], d["escalated"], d)
        self.assertEqual(d["fallbacks"], 0)

    def test_cloud_mode_streams_tokens_marked_as_from_the_cloud(self):
        chunks = list(self.client.chat.completions.create(model="duet", messages=PROMPT, temperature=0, max_tokens=12, stream=True,
                                                          extra_body={"duet": {"mode": "cloud"}}))
        sources = {c.model_extra["duet"]["source"] for c in chunks if c.choices and c.choices[0].delta.content}
        self.assertEqual(sources, {"cloud"})
        self.assertEqual(chunks[-1].model_extra["duet"]["cloud_tokens"], chunks[-1].usage.completion_tokens)


if __name__ == "__main__":
    sys.exit(unittest.main())
