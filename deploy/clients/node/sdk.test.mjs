// The official OpenAI Node SDK (pinned in package-lock.json, installed into
// $DUET_HOME/node-clients by deploy/clients/setup) against `edge-node serve` on the tiny model:
// streaming and not, the content-part form the Vercel AI SDK and chat front ends send, and a
// refusal raised as the SDK's BadRequestError. Run by test_sdks.py with DUET_BASE_URL set.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';

const require = createRequire(`${process.env.DUET_NODE_CLIENTS}/package.json`);
const OpenAI = require('openai');
const client = new OpenAI({ baseURL: process.env.DUET_BASE_URL, apiKey: 'unused', maxRetries: 0 });
const messages = [{ role: 'developer', content: 'Be brief.' }, { role: 'user', content: [{ type: 'text', text: 'Say hi.' }] }];

test('a chat completion answers with usage and Duet figures', async () => {
  const r = await client.chat.completions.create({ model: 'duet', messages, max_tokens: 5, temperature: 0 });
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 5);
  assert.equal(r.duet.mode, 'local');
});

test('streamed deltas add up to the whole answer, usage in the last chunk', async () => {
  const whole = await client.chat.completions.create({ model: 'duet', messages, max_tokens: 5, temperature: 0 });
  const stream = await client.chat.completions.create({ model: 'duet', messages, max_tokens: 5, temperature: 0, stream: true, stream_options: { include_usage: true } });
  let text = '';
  let usage = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? '';
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(usage.completion_tokens, 5);
});

test('a text completion takes a list of prompts', async () => {
  const r = await client.completions.create({ model: 'duet', prompt: ['def f(x):', 'hello'], max_tokens: 2, temperature: 0 });
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
});

test('an unsupported parameter is a BadRequestError naming it', async () => {
  await assert.rejects(
    client.chat.completions.create({ model: 'duet', messages, response_format: { type: 'json_object' } }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'response_format',
  );
});
