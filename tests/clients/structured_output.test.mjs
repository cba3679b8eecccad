// Structured output through the official OpenAI Node.js client, on random-weight models
// (garbage when unconstrained): 200 generated JSON schemas (nested objects, arrays with
// min/maxItems, enums, const, anyOf, $ref/$defs) × greedy and seeded sampling; every
// finish_reason "stop" output parses and validates with ajv; streamed == non-streamed and
// PD (router ▸ decode ▸ prefill) == monolithic and batched (concurrent) == alone on all
// 400 cases (each set sent 16 at a time; alone: one at a time on a server of its own);
// regex, choice and GBNF likewise (each case greedy and seeded: batched == alone ==
// streamed, PD == monolithic); chat.completions.parse with a JSON schema and a zod schema;
// a refused schema ⇒ 400 naming the field.
// Run by ctest (`node --test tests/clients`) from the repo root; PDSERVE_BIN names the binary.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { freePort, waitHealthy } from './helpers.mjs';
import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import Ajv from 'ajv';

const BIN = process.env.PDSERVE_BIN ?? 'build/pdserve';
const QWEN = '../shared/models/synth-qwen2-small-q8_0.gguf';  // byte-level BPE, 50,257 tokens
const STORIES = '../shared/models/stories260K.gguf';          // SentencePiece, 512 tokens
const procs = [];
let qwen, qwenAlone, stories, pd;

function start(args) {
  const extra = args[0] === 'router' ? [] : ['--threads', '1'];
  const p = spawn(BIN, [...args, '--log-level', 'warn', ...extra], { stdio: ['ignore', 'inherit', 'inherit'] });
  procs.push(p);
  return p;
}

async function serve(model) {
  const port = await freePort();
  start(['serve', '--model', model, '--port', String(port)]);
  const base = `http://127.0.0.1:${port}`;
  await waitHealthy(base);
  return new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0 });
}

before(async () => {
  // qwenAlone: a second server of the same model that gets one request at a time.
  [qwen, qwenAlone, stories] = await Promise.all([serve(QWEN), serve(QWEN), serve(STORIES)]);
  // A disaggregated cluster on the same model: every prompt is prefilled remotely, so
  // the prefill worker samples the first token under the grammar and the decode worker
  // the rest.
  const [pp, dp, rp] = await Promise.all([freePort(), freePort(), freePort()]);
  start(['prefill', '--model', QWEN, '--port', String(pp)]);
  start(['decode', '--model', QWEN, '--port', String(dp), '--prefill', `127.0.0.1:${pp}`, '--remote-prefill-threshold', '0']);
  start(['router', '--model', QWEN, '--port', String(rp), '--decode', `127.0.0.1:${dp}`]);
  await waitHealthy(`http://127.0.0.1:${rp}`);
  pd = new OpenAI({ baseURL: `http://127.0.0.1:${rp}/v1`, apiKey: 'unused', maxRetries: 0 });
});

after(() => {
  for (const p of procs) p.kill('SIGTERM');
});

// ---- random schemas (seeded) --------------------------------------------------------

function prng(seed) {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 4294967296;
  };
}

function genSchema(seed) {
  const r = prng(seed * 7919 + 1);
  const pick = (a) => a[Math.floor(r() * a.length)];
  const defs = {};
  const names = ['id', 'name', 'tags', 'ok', 'n', 'kind', 'items', 'meta', 'x', 'y'];
  const gen = (depth) => {
    const kinds = depth >= 3 ? ['integer', 'boolean', 'enum', 'string', 'null', 'const', 'number']
                             : ['integer', 'boolean', 'enum', 'string', 'const', 'object', 'object', 'array', 'array', 'anyOf', 'ref'];
    switch (pick(kinds)) {
      case 'integer': return { type: 'integer' };
      case 'number': return { type: 'number' };
      case 'boolean': return { type: 'boolean' };
      case 'null': return { type: 'null' };
      case 'string': return { type: 'string', maxLength: 1 + Math.floor(r() * 4) };
      case 'enum': return { enum: [pick(['a', 'bc', 'd e']), pick([1, 2.5, -3]), pick([null, true, 'z'])] };
      case 'const': return { const: pick(['a', 7, true, null, 'q"r']) };
      case 'object': return genObject(depth + 1);
      case 'array': {
        const min = Math.floor(r() * 2);
        return { type: 'array', items: gen(depth + 1), minItems: min, maxItems: min + Math.floor(r() * 3) };
      }
      case 'anyOf': return { anyOf: [gen(depth + 1), gen(depth + 1)] };
      case 'ref': {
        const name = `d${Object.keys(defs).length}`;
        defs[name] = {};
        defs[name] = gen(depth + 1);
        return { $ref: `#/$defs/${name}` };
      }
    }
  };
  const genObject = (depth) => {
    const n = 1 + Math.floor(r() * 3);
    const properties = {};
    const required = [];
    for (let i = 0; i < n; i++) {
      const k = pick(names);
      properties[k] = gen(depth);
      if (r() < 0.7 && !required.includes(k)) required.push(k);
    }
    return { type: 'object', properties, required, additionalProperties: false };
  };
  const root = genObject(0);
  if (Object.keys(defs).length) root.$defs = defs;
  return root;
}

const ajv = new Ajv({ strict: false });

function chatParams(schema, i, sampled, model) {
  return {
    model,
    messages: [{ role: 'user', content: `Give me record ${i}` }],
    max_tokens: 40,
    temperature: sampled ? 0.9 : 0,
    ...(sampled ? { seed: 1000 + i } : {}),
    response_format: { type: 'json_schema', json_schema: { name: `s${i}`, schema, strict: true } },
  };
}

async function streamed(client, params) {
  const s = await client.chat.completions.create({ ...params, stream: true });
  let text = '';
  let finish = null;
  for await (const c of s) {
    text += c.choices[0]?.delta?.content ?? '';
    finish = c.choices[0]?.finish_reason ?? finish;
  }
  return { text, finish };
}

/// Runs `fn` over `items` with at most `k` in flight (so requests share batches).
async function pool(items, k, fn) {
  const out = new Array(items.length);
  let next = 0;
  await Promise.all(Array.from({ length: k }, async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i], i);
    }
  }));
  return out;
}

function checkValid(schema, res, what) {
  const c = res.choices[0];
  if (c.finish_reason !== 'stop') {
    assert.equal(c.finish_reason, 'length', what);
    return false;
  }
  let v;
  assert.doesNotThrow(() => { v = JSON.parse(c.message.content); }, `${what}: ${c.message.content}`);
  const validate = ajv.compile(schema);
  assert.ok(validate(v), `${what}: ${c.message.content} vs ${JSON.stringify(schema)}: ${ajv.errorsText(validate.errors)}`);
  return true;
}

test('200 generated JSON schemas: outputs validate; batched == alone, streamed == non-streamed, PD == monolithic', async () => {
  const cases = [];
  for (let i = 0; i < 200; i++) for (const sampled of [false, true]) cases.push({ i, sampled, schema: genSchema(i) });
  // Batched: many requests in flight at once.
  const batched = await pool(cases, 16, (c) => qwen.chat.completions.create(chatParams(c.schema, c.i, c.sampled, 'synth-qwen2-small-q8_0')));
  let stops = 0;
  cases.forEach((c, k) => { stops += checkValid(c.schema, batched[k], `schema ${c.i} sampled=${c.sampled}`); });
  assert.ok(stops > 200, `only ${stops} of ${cases.length} outputs finished with stop`);
  // Streamed and through PD, every case (each set concurrently, so the batches differ
  // from the first run's); alone: one request at a time, on a server of its own, while
  // the other two sets run.
  const params = (c) => chatParams(c.schema, c.i, c.sampled, 'synth-qwen2-small-q8_0');
  const [streamedAll, pdAll, aloneAll] = await Promise.all([
    pool(cases, 16, (c) => streamed(qwen, params(c))),
    pool(cases, 16, (c) => pd.chat.completions.create(params(c))),
    pool(cases, 1, (c) => qwenAlone.chat.completions.create(params(c))),
  ]);
  cases.forEach((c, k) => {
    const b = batched[k].choices[0];
    assert.equal(streamedAll[k].text, b.message.content, `streamed vs not, case ${k}`);
    assert.equal(streamedAll[k].finish, b.finish_reason, `streamed vs not, case ${k}`);
    assert.equal(pdAll[k].choices[0].message.content, b.message.content, `PD vs monolithic, case ${k}`);
    assert.equal(pdAll[k].choices[0].finish_reason, b.finish_reason, `PD vs monolithic, case ${k}`);
    assert.equal(aloneAll[k].choices[0].message.content, b.message.content, `alone vs batched, case ${k}`);
    assert.equal(aloneAll[k].choices[0].finish_reason, b.finish_reason, `alone vs batched, case ${k}`);
  });
});

test('the SentencePiece vocabulary (stories260K): outputs validate, n > 1 choices each valid', async () => {
  let stops = 0;
  for (let i = 0; i < 40; i++) {
    const schema = genSchema(500 + i);
    const res = await stories.chat.completions.create({ ...chatParams(schema, i, true, 'stories260K'), n: 3, max_tokens: 60 });
    assert.equal(res.choices.length, 3);
    for (const c of res.choices) stops += checkValid(schema, { choices: [c] }, `stories schema ${i}`);
    // choice k of a seeded request is the one-choice request with seed + k
    const one = await stories.chat.completions.create({ ...chatParams(schema, i, true, 'stories260K'), seed: 1000 + i + 2, max_tokens: 60 });
    assert.equal(one.choices[0].message.content, res.choices[2].message.content);
  }
  assert.ok(stops > 40, `only ${stops} stops`);
});

test('regex, choice and GBNF constraints hold, greedy and sampled; batched == alone == streamed, PD == monolithic', async () => {
  const regexes = ['[a-z]{2,5}-\\d{3}', '(yes|no|maybe)!?', '\\(\\d{3}\\) \\d{3}-\\d{4}', '[A-Z][a-z]* [A-Z][a-z]{0,4}\\.'];
  const choices = ['red', 'green', 'blue sky', 'ünïcode ✓'];
  const gbnf = 'root ::= item ("," item){0,3}\nitem ::= [0-9]{1,2} | "x"\n';
  // Each case: a request body and what a finished ("stop") output must match.
  const cases = (model) => {
    const out = [];
    for (let seed = 0; seed < 6; seed++) {
      const sampling = seed === 0 ? { temperature: 0 } : { temperature: 1, seed };
      for (const re of regexes) {
        out.push({ body: { model, prompt: 'Answer:', max_tokens: 24, ...sampling, structured_outputs: { regex: re } },
                   check: (t) => assert.match(t, new RegExp(`^(?:${re})$`)) });
      }
      out.push({ body: { model, prompt: 'Color:', max_tokens: 16, ...sampling, guided_choice: choices },
                 mustStop: true, check: (t) => assert.ok(choices.includes(t), t) });
      out.push({ body: { model, prompt: 'List:', max_tokens: 30, ...sampling, grammar: gbnf },
                 check: (t) => assert.match(t, /^([0-9]{1,2}|x)(,([0-9]{1,2}|x)){0,3}$/) });
    }
    return out;
  };
  const streamedText = async (client, body) => {
    const s = await client.completions.create({ ...body, stream: true });
    let text = '';
    let finish = null;
    for await (const c of s) {
      text += c.choices[0]?.text ?? '';
      finish = c.choices[0]?.finish_reason ?? finish;
    }
    return { text, finish };
  };
  for (const [client, model, alone] of [[qwen, 'synth-qwen2-small-q8_0', qwenAlone], [stories, 'stories260K', stories]]) {
    const cs = cases(model);
    // alone: one request at a time (on qwenAlone, a server of its own, while the batched
    // and streamed sets run concurrently on the other)
    const [aloneRes, batched, streamedRes, pdRes] = await Promise.all([
      alone === client ? null : pool(cs, 1, (c) => alone.completions.create(c.body)),
      pool(cs, 16, (c) => client.completions.create(c.body)),
      pool(cs, 16, (c) => streamedText(client, c.body)),
      client === qwen ? pool(cs, 16, (c) => pd.completions.create(c.body)) : null,
    ]);
    const aloneAll = aloneRes ?? await pool(cs, 1, (c) => alone.completions.create(c.body));
    cs.forEach((c, k) => {
      const what = `${model} case ${k}: ${JSON.stringify(c.body)}`;
      const b = batched[k].choices[0];
      if (c.mustStop) assert.equal(b.finish_reason, 'stop', what);
      if (b.finish_reason === 'stop') c.check(b.text);
      else assert.equal(b.finish_reason, 'length', what);
      assert.equal(aloneAll[k].choices[0].text, b.text, `alone vs batched, ${what}`);
      assert.equal(aloneAll[k].choices[0].finish_reason, b.finish_reason, `alone vs batched, ${what}`);
      assert.equal(streamedRes[k].text, b.text, `streamed vs not, ${what}`);
      assert.equal(streamedRes[k].finish, b.finish_reason, `streamed vs not, ${what}`);
      if (!pdRes) return;
      assert.equal(pdRes[k].choices[0].text, b.text, `PD vs monolithic, ${what}`);
      assert.equal(pdRes[k].choices[0].finish_reason, b.finish_reason, `PD vs monolithic, ${what}`);
    });
  }
});

test('chat.completions.parse with a JSON schema and with a zod schema', async () => {
  const schema = {
    type: 'object',
    properties: { city: { type: 'string', maxLength: 3 }, rank: { type: 'integer' }, open: { type: 'boolean' } },
    required: ['city', 'rank', 'open'],
    additionalProperties: false,
  };
  // parse() throws LengthFinishReasonError for a cut output (finish_reason "length").
  const parseOrCut = (p) => qwen.chat.completions.parse(p).catch((e) => {
    if (e.constructor.name === 'LengthFinishReasonError') return null;
    throw e;
  });
  let parsedJson = 0;
  for (const seed of [1, 2, 3, 4]) {
    const res = await parseOrCut({
      model: 'synth-qwen2-small-q8_0',
      messages: [{ role: 'user', content: 'A city?' }],
      temperature: 1, seed, max_tokens: 40,
      response_format: { type: 'json_schema', json_schema: { name: 'city', schema, strict: true } },
    });
    if (!res) continue;
    parsedJson++;
    const v = res.choices[0].message.parsed;
    assert.equal(typeof v.city, 'string');
    assert.ok(Number.isInteger(v.rank));
    assert.equal(typeof v.open, 'boolean');
  }
  const Point = z.object({ label: z.enum(['a', 'b']), xs: z.array(z.number()).max(2), note: z.string().max(4).nullable() });
  assert.ok(parsedJson > 0, 'no JSON-schema output finished');
  let parsed = 0;
  for (const seed of [1, 2, 3, 4, 5, 6]) {
    const res = await parseOrCut({
      model: 'synth-qwen2-small-q8_0',
      messages: [{ role: 'user', content: 'A point?' }],
      temperature: 1, seed, max_tokens: 40,
      response_format: zodResponseFormat(Point, 'point'),
    });
    if (!res) continue;
    assert.doesNotThrow(() => Point.parse(res.choices[0].message.parsed));
    parsed++;
  }
  assert.ok(parsed > 0, 'no zod output finished');
});

test('a schema the engine cannot enforce gets a 400 naming the field', async () => {
  await assert.rejects(
    qwen.chat.completions.create({
      model: 'synth-qwen2-small-q8_0', messages: [{ role: 'user', content: 'x' }],
      response_format: { type: 'json_schema', json_schema: { name: 'n', schema: { type: 'object', properties: { a: { type: 'integer', minimum: 3 } } } } },
    }),
    (e) => e.status === 400 && e.param === 'response_format.json_schema.schema' && /minimum/.test(e.message),
  );
  await assert.rejects(
    qwen.completions.create({ model: 'synth-qwen2-small-q8_0', prompt: 'x', guided_regex: 'a(?<=b)' }),
    (e) => e.status === 400 && e.param === 'guided_regex',
  );
  await assert.rejects(
    qwen.completions.create({ model: 'synth-qwen2-small-q8_0', prompt: 'x', grammar: 'root ::= "a"\nb ::= [x' }),
    (e) => e.status === 400 && e.param === 'grammar' && /line 2/.test(e.message),
  );
});

// ---- tool calling -------------------------------------------------------------------

const weatherParams = {
  type: 'object',
  properties: { city: { type: 'string', maxLength: 5 }, unit: { enum: ['c', 'f'] }, days: { type: 'integer' } },
  required: ['city', 'unit', 'days'],
  additionalProperties: false,
};
const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'The weather of a city', parameters: weatherParams } },
  { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: { tz: { enum: ['utc', 'cet'] } }, required: ['tz'] } } },
];
const toolSchemas = Object.fromEntries(tools.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));

function checkCalls(msg, what) {
  assert.ok(Array.isArray(msg.tool_calls) && msg.tool_calls.length > 0, `${what}: ${JSON.stringify(msg)}`);
  for (const c of msg.tool_calls) {
    assert.equal(c.type, 'function');
    assert.match(c.id, /^call_/);
    assert.ok(toolSchemas[c.function.name], c.function.name);
    const args = JSON.parse(c.function.arguments);
    assert.ok(toolSchemas[c.function.name](args), `${what}: ${c.function.arguments}`);
  }
}

test('tool calls: required / named / parallel off, streamed == not, and the manual loop', async () => {
  const model = 'synth-qwen2-small-q8_0';
  let calls = 0;
  for (let seed = 0; seed < 8; seed++) {
    const base = {
      model, max_tokens: 120, messages: [{ role: 'user', content: 'What is the weather in Oslo?' }], tools,
      ...(seed === 0 ? { temperature: 0 } : { temperature: 1, seed }),
    };
    for (const extra of [{ tool_choice: 'required' }, { tool_choice: { type: 'function', function: { name: 'get_time' } } },
                         { tool_choice: 'required', parallel_tool_calls: false }]) {
      const p = { ...base, ...extra };
      const res = await qwen.chat.completions.create(p);
      const c = res.choices[0];
      if (c.finish_reason === 'length') continue;
      assert.equal(c.finish_reason, 'tool_calls');
      checkCalls(c.message, JSON.stringify(extra));
      calls++;
      if (extra.tool_choice.function) assert.ok(c.message.tool_calls.every((t) => t.function.name === 'get_time'));
      if (extra.parallel_tool_calls === false) assert.equal(c.message.tool_calls.length, 1);
      // The same request streamed: the same calls (ids aside), assembled from deltas.
      const s = await qwen.chat.completions.create({ ...p, stream: true });
      const acc = [];
      let finish = null;
      for await (const ch of s) {
        for (const d of ch.choices[0]?.delta?.tool_calls ?? []) {
          acc[d.index] ??= { name: '', arguments: '' };
          acc[d.index].name += d.function?.name ?? '';
          acc[d.index].arguments += d.function?.arguments ?? '';
        }
        finish = ch.choices[0]?.finish_reason ?? finish;
      }
      assert.equal(finish, 'tool_calls');
      assert.deepEqual(acc, c.message.tool_calls.map((t) => ({ name: t.function.name, arguments: t.function.arguments })));
      // Manual loop: send the calls and their results back; the model answers in text.
      const follow = await qwen.chat.completions.create({
        ...base, tool_choice: 'none', max_tokens: 8,
        messages: [...base.messages, c.message,
                   ...c.message.tool_calls.map((t) => ({ role: 'tool', tool_call_id: t.id, content: '{"ok": true}' }))],
      });
      assert.equal(typeof follow.choices[0].message.content, 'string');
      assert.equal(follow.choices[0].message.tool_calls, undefined);
    }
  }
  assert.ok(calls > 8, `only ${calls} complete tool calls`);
});

test('runTools invokes the named function with arguments that validate', async () => {
  const seen = [];
  for (let seed = 1; seed <= 4; seed++) {
    const runner = qwen.chat.completions.runTools({
      model: 'synth-qwen2-small-q8_0', temperature: 1, seed, max_tokens: 120,
      messages: [{ role: 'user', content: 'Weather in Rome for 3 days?' }],
      tool_choice: { type: 'function', function: { name: 'get_weather' } },
      tools: [{ type: 'function', function: { name: 'get_weather', parameters: weatherParams, parse: JSON.parse,
                                              function: (args) => { seen.push(args); return 'sunny'; } } }],
    });
    try {
      await runner.done();
    } catch (e) {
      if (!/length/i.test(String(e))) throw e;  // cut by max_tokens: no call to make
    }
  }
  assert.ok(seen.length > 0, 'the function was never called');
  for (const a of seen) assert.ok(toolSchemas.get_weather(a), JSON.stringify(a));
});

test('malformed tools get a 400 naming the field', async () => {
  const bad = async (t, param) => assert.rejects(
    qwen.chat.completions.create({ model: 'synth-qwen2-small-q8_0', messages: [{ role: 'user', content: 'x' }], ...t }),
    (e) => e.status === 400 && e.param === param);
  await bad({ tools: [{ type: 'function', function: { name: 'has space' } }] }, 'tools[0].function.name');
  await bad({ tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { a: { not: {} } } } } }] },
            'tools[0].function.parameters');
  await bad({ tools, tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice');
  await bad({ tools: [{ type: 'retrieval' }] }, 'tools[0].type');
});
