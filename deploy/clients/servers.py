"""Tiny-model servers the client tests share: `edge-node serve --model tiny-qwen2` alone, and
routed through a `cloud-gateway` embedding the same tiny model (fast enough to run every client
against, streaming and not). Started once per test module, on free loopback ports."""
import socket
import tempfile
from pathlib import Path

from test_openai import BIN, Process, free_port

TINY = "tiny-qwen2"


class TinyLocal:
    """`edge-node serve` on the tiny model, no gateway."""

    def __init__(self):
        self.port = free_port()
        self.server = Process([BIN / "edge-node", "serve", "--model", TINY, "--listen", f"127.0.0.1:{self.port}", "--threads", "1"],
                              r"serving the OpenAI API")
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def stop(self):
        self.server.stop()


class TinyRouted:
    """`edge-node serve` on the tiny model, routed through a gateway that embeds it too."""

    def __init__(self):
        self.dir = tempfile.TemporaryDirectory()
        cert = Path(self.dir.name) / "gateway-cert.pem"
        quic = free_port(socket.SOCK_DGRAM)
        self.gateway = Process([BIN / "cloud-gateway", "--model", TINY, "--threads", "1", "--listen", f"127.0.0.1:{quic}", "--http-listen", "off",
                                "--write-cert", cert, "--log", "warn"], r"ready on")
        self.port = free_port()
        self.server = Process([BIN / "edge-node", "serve", "--model", TINY, "--listen", f"127.0.0.1:{self.port}", "--threads", "1",
                               "--gateway", f"127.0.0.1:{quic}", "--ca-cert", cert, "--tau", "0.5",
                               "--deadline-min-ms", "60000", "--deadline-max-ms", "60000"], r"serving the OpenAI API")
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def stop(self):
        self.server.stop()
        self.gateway.stop()
        self.dir.cleanup()
