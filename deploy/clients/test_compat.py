"""The requests the ecosystem's clients send, through the official `openai` Python client, and
bad bodies over raw HTTP: each accepted as the compatibility table (docs/src/serve.md) says, or refused with an
OpenAI error naming the parameter. Runs on the tiny model (`servers.py`)."""
import http.client
import json
import math
import unittest
import urllib.parse

import openai

from servers import TinyLocal, TinyRouted

USER = [{"role": "user", "content": "Say hi."}]


def post(base_url, path, body, content_type="application/json"):
    """POST raw bytes; (status, parsed JSON body). A server may answer (413) before it has read a
    large body and close the connection: the answer is read all the same."""
    url = urllib.parse.urlsplit(base_url + path)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=120)
    try:
        try:
            conn.request("POST", url.path, body=body, headers={"Content-Type": content_type})
        except (BrokenPipeError, ConnectionResetError):
            pass
        r = conn.getresponse()
        return r.status, json.loads(r.read() or b"{}")
    finally:
        conn.close()


class AcceptedAndRefused(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tiny = TinyLocal()
        cls.client = openai.OpenAI(base_url=cls.tiny.base_url, api_key="unused", max_retries=0, timeout=120)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.tiny.stop()

    def chat(self, **kw):
        return self.client.chat.completions.create(model="duet", **{"messages": USER, "max_tokens": 4, "temperature": 0, **kw})

    def refused(self, param, call):
        with self.assertRaises(openai.BadRequestError) as e:
            call()
        self.assertEqual(e.exception.body.get("param"), param, e.exception.body)
        return e.exception.body["message"]

    def test_content_part_arrays_are_read_as_their_joined_text(self):
        parts = [{"role": "user", "content": [{"type": "text", "text": "Say"}, {"type": "text", "text": "hi."}]}]
        joined = [{"role": "user", "content": "Say\nhi."}]
        self.assertEqual(self.chat(messages=parts).usage.prompt_tokens, self.chat(messages=joined).usage.prompt_tokens)
        self.assertEqual(self.chat(messages=parts).choices[0].message.content, self.chat(messages=joined).choices[0].message.content)

    def test_image_and_audio_parts_are_refused_by_name(self):
        image = [{"role": "user", "content": [{"type": "text", "text": "what?"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]}]
        self.assertIn("image_url", self.refused("messages[0].content[1].type", lambda: self.chat(messages=image)))
        audio = [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AA==", "format": "wav"}}]}]
        self.refused("messages[0].content[0].type", lambda: self.chat(messages=audio))

    def test_developer_is_the_system_message(self):
        dev = self.chat(messages=[{"role": "developer", "content": "Be brief."}, *USER])
        system = self.chat(messages=[{"role": "system", "content": "Be brief."}, *USER])
        self.assertEqual((dev.usage.prompt_tokens, dev.choices[0].message.content), (system.usage.prompt_tokens, system.choices[0].message.content))

    def test_tool_calls_and_tool_results_in_history_are_accepted(self):
        history = [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "18C, sunny"},
        ]
        r = self.chat(messages=history)
        self.assertGreater(r.usage.prompt_tokens, 40)
        self.assertEqual(r.choices[0].finish_reason, "length")

    def test_a_prompt_list_gets_one_choice_per_prompt_in_order(self):
        one = self.client.completions.create(model="duet", prompt="def f(x):", max_tokens=3, temperature=0)
        r = self.client.completions.create(model="duet", prompt=["def f(x):", "hello", [1, 2, 3]], max_tokens=3, temperature=0)
        self.assertEqual([c.index for c in r.choices], [0, 1, 2])
        self.assertEqual(r.choices[0].text, one.choices[0].text)
        self.assertEqual(r.usage.completion_tokens, 9)

    def test_greedy_chat_logprobs_put_the_chosen_token_first(self):
        r = self.chat(logprobs=True, top_logprobs=2)
        content = r.choices[0].logprobs.content
        self.assertEqual(len(content), r.usage.completion_tokens)
        self.assertEqual("".join(t.token for t in content), r.choices[0].message.content)
        for t in content:
            self.assertEqual(len(t.top_logprobs), 2)
            self.assertLessEqual(t.logprob, 0)
            self.assertAlmostEqual(t.logprob, t.top_logprobs[0].logprob, places=5)
            self.assertGreaterEqual(t.top_logprobs[0].logprob, t.top_logprobs[1].logprob)

    def test_echoed_prompt_positions_are_scored_in_the_same_context_as_generation(self):
        echo = self.client.completions.create(model="duet", prompt=[5, 6, 7, 8], max_tokens=1, temperature=0, logprobs=1, echo=True)
        lp = echo.choices[0].logprobs
        self.assertEqual(len(lp.tokens), 5)
        self.assertIsNone(lp.token_logprobs[0])
        self.assertTrue(all(x <= 0 for x in lp.token_logprobs[1:]))
        self.assertEqual(lp.text_offset[0], 0)
        self.assertTrue(echo.choices[0].text.startswith("".join(lp.tokens[:4])))
        # The likeliest token after [5, 6] as a greedy generation sees it = the top alternative the
        # echo reports at position 2 (where token 7 was scored).
        gen = self.client.completions.create(model="duet", prompt=[5, 6], max_tokens=1, temperature=0, logprobs=1)
        (best,) = lp.top_logprobs[2].values()
        self.assertTrue(math.isclose(gen.choices[0].logprobs.token_logprobs[0], best, abs_tol=1e-3), (gen.choices[0].logprobs, best))

    def test_n_choices_are_sampled_and_refused_when_streamed(self):
        r = self.chat(n=3, temperature=1.0, seed=7, max_tokens=6)
        self.assertEqual([c.index for c in r.choices], [0, 1, 2])
        self.assertGreater(len({c.message.content for c in r.choices}), 1, "seed + i per choice")
        self.refused("n", lambda: list(self.chat(n=3, stream=True)))

    def test_include_usage_adds_a_last_chunk_with_usage_and_no_choices(self):
        chunks = list(self.chat(stream=True, stream_options={"include_usage": True}))
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, 4)
        self.assertTrue(all(c.usage is None for c in chunks[:-1]))

    def test_unsupported_parameters_are_refused_naming_them(self):
        self.assertIn("constrained decoding", self.refused("response_format", lambda: self.chat(response_format={"type": "json_object"})))
        self.refused("tools", lambda: self.chat(tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}]))
        self.refused("logit_bias", lambda: self.chat(logit_bias={"1": 5}))
        self.refused("frequency_penalty", lambda: self.chat(frequency_penalty=0.5))
        self.refused("logprobs", lambda: list(self.chat(logprobs=True, stream=True)))
        self.assertEqual(self.chat(response_format={"type": "text"}, frequency_penalty=0).choices[0].finish_reason, "length")

    def test_bad_bodies_get_their_status_and_message_and_the_server_keeps_serving(self):
        msgs = [{"role": "user", "content": "hi"}]
        cases = [
            ("malformed JSON", b'{"messages": [', 400, None, "JSON"),
            ("not an object", b'[1, 2]', 400, None, "JSON object"),
            ("wrong type", json.dumps({"messages": msgs, "max_tokens": "many"}).encode(), 400, "max_tokens", "max_tokens"),
            ("messages not a list", json.dumps({"messages": "hi"}).encode(), 400, "messages", "array"),
            ("unknown role", json.dumps({"messages": [{"role": "wizard", "content": "hi"}]}).encode(), 400, "messages[0].role", "wizard"),
            ("missing content", json.dumps({"messages": [{"role": "user"}]}).encode(), 400, "messages[0].content", "required"),
            ("10,000 messages", json.dumps({"messages": msgs * 10_000}).encode(), 400, "messages", "at most"),
            ("10 MB", json.dumps({"messages": [{"role": "user", "content": "a" * 10_000_000}]}).encode(), 413, None, "limit"),
            ("not JSON at all", b"hello", 400, None, "JSON"),
        ]
        for name, body, status, param, words in cases:
            with self.subTest(name):
                got, err = post(self.tiny.base_url, "/chat/completions", body)
                self.assertEqual(got, status, err)
                self.assertEqual(err["error"].get("param"), param, err)
                self.assertIn(words, err["error"]["message"])
                self.assertEqual(err["error"]["type"], "invalid_request_error")
        got, err = post(self.tiny.base_url, "/chat/completions", json.dumps({"messages": msgs}).encode(), content_type="text/plain")
        self.assertEqual(got, 415, err)
        got, r = post(self.tiny.base_url, "/chat/completions", json.dumps({"messages": msgs, "max_tokens": 3}).encode())
        self.assertEqual((got, r["usage"]["completion_tokens"]), (200, 3))


class RoutedLogprobs(unittest.TestCase):
    """Cloud tokens get logprobs too: the SLM's view of the token the cloud chose."""

    @classmethod
    def setUpClass(cls):
        cls.tiny = TinyRouted()
        cls.client = openai.OpenAI(base_url=cls.tiny.base_url, api_key="unused", max_retries=0, timeout=120)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.tiny.stop()

    def test_cloud_tokens_carry_the_slms_logprobs(self):
        r = self.client.chat.completions.create(model="duet", messages=USER, max_tokens=4, temperature=0, logprobs=True, extra_body={"duet": {"mode": "cloud"}})
        self.assertEqual(r.model_extra["duet"]["cloud_tokens"], 4)
        self.assertEqual(len(r.choices[0].logprobs.content), 4)
        self.assertTrue(all(t.logprob <= 0 for t in r.choices[0].logprobs.content))


if __name__ == "__main__":
    unittest.main()
