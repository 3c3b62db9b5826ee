"""The web playground of `edge-node serve` in a real browser (Debian's chromium, headless).

Starts a real gateway and a routed server, opens the playground, submits a prompt in routed mode
with tau 1 (every token escalated, so cloud tokens must appear), waits for the streamed answer
and checks that cloud tokens are highlighted; saves a screenshot to $DUET_PLAYGROUND_SHOT (default
$DUET_HOME/playground.png). Drives chromium over the DevTools protocol; skipped with a reason
when chromium is not installed (deploy/test installs it).
"""
import base64
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.request
from pathlib import Path

import websocket

from test_openai import BIN, Process, free_port

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class DevTools:
    """The smallest DevTools-protocol client: send a command, wait for its answer."""

    def __init__(self, port):
        deadline = time.monotonic() + 30
        while True:
            try:
                targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=2))
                page = next(t for t in targets if t["type"] == "page")
                break
            except Exception:  # chromium still starting
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=60)
        self.next_id = 0

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def eval(self, expression):
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")


@unittest.skipUnless(CHROMIUM, "chromium is not installed (apt-get install chromium)")
class Playground(unittest.TestCase):
    def test_a_routed_prompt_streams_with_cloud_tokens_highlighted(self):
        with tempfile.TemporaryDirectory() as d:
            cert = Path(d) / "gateway-cert.pem"
            quic = free_port(socket.SOCK_DGRAM)
            gateway = Process([BIN / "cloud-gateway", "--listen", f"127.0.0.1:{quic}", "--http-listen", "off", "--write-cert", cert,
                               "--log", "warn"], r"ready on")
            port = free_port()
            server = Process([BIN / "edge-node", "serve", "--listen", f"127.0.0.1:{port}", "--threads", "1", "--gateway",
                              f"127.0.0.1:{quic}", "--ca-cert", cert, "--deadline-min-ms", "60000", "--deadline-max-ms", "60000"],
                             r"serving the OpenAI API")
            devtools_port = free_port()
            browser = subprocess.Popen([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1000,720",
                                        f"--remote-debugging-port={devtools_port}", f"--user-data-dir={d}/profile", "about:blank"],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            tab = None
            try:
                tab = DevTools(devtools_port)
                tab.call("Page.enable")
                tab.call("Page.navigate", url=f"http://127.0.0.1:{port}/?mode=routed&tau=1&max=16&prompt=What%20is%20the%20capital%20of%20France%3F&run=1")
                deadline = time.monotonic() + 240
                while tab.eval("document.body && document.body.dataset.done") is None and time.monotonic() < deadline:
                    time.sleep(0.5)
                self.assertEqual(tab.eval("document.body.dataset.done"), "1", tab.eval("document.getElementById('error').textContent"))
                text = tab.eval("document.getElementById('output').textContent")
                cloud = tab.eval("document.querySelectorAll('#output span.cloud').length")
                pieces = tab.eval("document.querySelectorAll('#output span').length")
                self.assertIn("Paris", text)
                self.assertGreater(cloud, 0)
                self.assertEqual(cloud, pieces, "at tau 1 every piece came from the cloud")
                self.assertNotEqual(tab.eval("document.getElementById('s-cloud').textContent"), "–")
                shot = Path(os.environ.get("DUET_PLAYGROUND_SHOT", Path(os.environ.get("DUET_HOME", Path.home() / ".cache" / "duet")) / "playground.png"))
                shot.parent.mkdir(parents=True, exist_ok=True)
                shot.write_bytes(base64.b64decode(tab.call("Page.captureScreenshot", format="png")["data"]))
            finally:
                if tab is not None:
                    tab.ws.close()
                browser.kill()
                browser.wait()
                server.stop()
                gateway.stop()


if __name__ == "__main__":
    unittest.main()
