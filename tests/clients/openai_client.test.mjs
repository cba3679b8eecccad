// pdserve through the official OpenAI Node.js client: the same answers as the reference
// engine, streamed and not, chat, models, logprobs, and OpenAI-shaped errors.
// Run by ctest (`node --test tests/clients`) from the repo root; PDSERVE_BIN names the binary.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { freePort, waitHealthy } from './helpers.mjs';
import OpenAI from 'openai';

const BIN = process.env.PDSERVE_BIN ?? 'build/pdserve';
const MODEL = '../shared/models/stories260K.gguf';
const reference = JSON.parse(readFileSync('../shared/reference/stories260K.json', 'utf8'));
const refText = (c) => Buffer.from(c.text_bytes_hex, 'hex').toString('utf8');

let server;
let client;

before(async () => {
  const port = await freePort();
  server = spawn(BIN, ['serve', '--model', MODEL, '--port', String(port), '--log-level', 'warn'], {
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  const base = `http://127.0.0.1:${port}`;
  await waitHealthy(base);
  client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0 });
});

after(() => {
  server?.kill('SIGTERM');
});

test('models.list names the served model', async () => {
  const models = await client.models.list();
  const ids = models.data.map((m) => m.id);
  assert.deepEqual(ids, ['stories260K']);
});

test('completions equal the reference engine, streamed and not', async () => {
  for (const c of reference.cases) {
    const params = { model: 'stories260K', prompt: c.prompt, max_tokens: c.tokens.length, temperature: 0 };
    const res = await client.completions.create(params);
    assert.equal(res.choices[0].text, refText(c), `prompt ${JSON.stringify(c.prompt)}`);
    assert.equal(res.choices[0].finish_reason, 'length');
    assert.equal(res.usage.completion_tokens, c.tokens.length);
    assert.equal(res.usage.prompt_tokens, c.prompt_tokens.length);

    const stream = await client.completions.create({ ...params, stream: true });
    let joined = '';
    let finish = null;
    for await (const chunk of stream) {
      joined += chunk.choices[0]?.text ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.equal(joined, refText(c));
    assert.equal(finish, 'length');
  }
});

test('completions logprobs agree with the reference within 1e-3', async () => {
  const c = reference.cases[0];
  const res = await client.completions.create({
    model: 'stories260K', prompt: c.prompt, max_tokens: 16, temperature: 0, logprobs: 5,
  });
  const lp = res.choices[0].logprobs;
  assert.equal(lp.tokens.length, 16);
  assert.equal(lp.top_logprobs.length, 16);
  for (let step = 0; step < 16; step++) {
    const ours = Object.values(lp.top_logprobs[step]);
    const best = Math.max(...ours);
    assert.ok(Math.abs(best - c.top_logprobs[step][0][1]) < 1e-3, `step ${step}: ${best} vs ${c.top_logprobs[step][0][1]}`);
    assert.ok(Math.abs(lp.token_logprobs[step] - c.top_logprobs[step][0][1]) < 1e-3);
  }
});

test('chat completions: streamed deltas join to the non-streamed message', async () => {
  const params = {
    model: 'stories260K',
    messages: [{ role: 'user', content: 'Once upon a time' }],
    max_tokens: 24,
    temperature: 0,
  };
  const res = await client.chat.completions.create(params);
  const msg = res.choices[0].message;
  assert.equal(msg.role, 'assistant');
  assert.ok(msg.content.length > 0);
  assert.equal(res.choices[0].finish_reason, 'length');
  assert.equal(res.usage.completion_tokens, 24);

  const stream = await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  let joined = '';
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.choices.length) joined += chunk.choices[0].delta?.content ?? '';
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(joined, msg.content);
  assert.equal(usage.completion_tokens, 24);
});

test('seeded sampling is reproducible', async () => {
  const params = { model: 'stories260K', prompt: 'The little dog', max_tokens: 24, temperature: 0.8, seed: 7 };
  const a = await client.completions.create(params);
  const b = await client.completions.create(params);
  assert.equal(a.choices[0].text, b.choices[0].text);
});

test('invalid requests raise OpenAI errors and the server keeps serving', async () => {
  await assert.rejects(
    client.completions.create({ model: 'stories260K', prompt: 'hi', max_tokens: 0 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && /max_tokens/.test(e.message),
  );
  await assert.rejects(
    client.completions.create({ model: 'stories260K', prompt: 'hi', temperature: -1 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'temperature',
  );
  await assert.rejects(
    client.completions.create({ model: 'no-such-model', prompt: 'hi' }),
    (e) => e instanceof OpenAI.NotFoundError && e.code === 'model_not_found',
  );
  await assert.rejects(
    client.completions.create({ model: 'stories260K', prompt: 'hi '.repeat(600) }),
    (e) => e instanceof OpenAI.BadRequestError,
  );
  const ok = await client.completions.create({ model: 'stories260K', prompt: 'Once upon a time', max_tokens: 4, temperature: 0 });
  assert.equal(ok.choices[0].text, refText(reference.cases[0]).slice(0, ok.choices[0].text.length));
});
