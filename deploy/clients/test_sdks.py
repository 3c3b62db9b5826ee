"""Other real clients against `edge-node serve` on the tiny model: the official OpenAI Node SDK
(its own test file, node/sdk.test.mjs, under node's test runner) and LangChain's `ChatOpenAI`,
streaming and not."""
import os
import subprocess
import unittest
from pathlib import Path

from langchain_core.messages import HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI

from servers import TinyLocal

HERE = Path(__file__).resolve().parent


class NodeSdk(unittest.TestCase):
    def test_the_node_sdk_passes_its_tests(self):
        clients = Path(os.environ.get("DUET_HOME", Path.home() / ".cache" / "duet")) / "node-clients"
        tiny = TinyLocal()
        try:
            env = dict(os.environ, DUET_BASE_URL=tiny.base_url, DUET_NODE_CLIENTS=str(clients))
            r = subprocess.run(["node", "--test", str(HERE / "node" / "sdk.test.mjs")], env=env, capture_output=True, text=True, timeout=300)
        finally:
            tiny.stop()
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("# pass 4", r.stdout)


class LangChain(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tiny = TinyLocal()
        cls.llm = ChatOpenAI(base_url=cls.tiny.base_url, api_key="unused", model="duet", temperature=0, max_tokens=5, max_retries=0)

    @classmethod
    def tearDownClass(cls):
        cls.tiny.stop()

    def test_invoke_answers_with_token_usage(self):
        r = self.llm.invoke([SystemMessage("Be brief."), HumanMessage("Say hi.")])
        self.assertIsInstance(r.content, str)
        self.assertEqual(r.usage_metadata["output_tokens"], 5)

    def test_streamed_chunks_add_up_to_the_invoked_answer(self):
        whole = self.llm.invoke([HumanMessage("Say hi.")])
        chunks = list(ChatOpenAI(base_url=self.tiny.base_url, api_key="unused", model="duet", temperature=0, max_tokens=5, max_retries=0,
                                 stream_usage=True).stream([HumanMessage("Say hi.")]))
        self.assertEqual("".join(c.content for c in chunks), whole.content)
        self.assertEqual(sum(c.usage_metadata["output_tokens"] for c in chunks if c.usage_metadata), 5)

    def test_content_blocks_are_read_as_text(self):
        blocks = HumanMessage(content=[{"type": "text", "text": "Say hi."}])
        self.assertEqual(self.llm.invoke([blocks]).content, self.llm.invoke([HumanMessage("Say hi.")]).content)


if __name__ == "__main__":
    unittest.main()
