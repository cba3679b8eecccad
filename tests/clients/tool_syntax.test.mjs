// Tool calls in the model's native syntax, chosen from its chat template (server/tool_syntax.h):
// `pdserve serve --chat-template-file` with the Qwen2.5 (Hermes <tool_call>), Llama 3.1
// (JSON {"name", "parameters"}) and Mistral v0.3 ([TOOL_CALLS] [...]) templates on a
// random-weight model, through the official OpenAI client: tool_choice required / named
// gives calls whose arguments validate against the function's parameters schema (ajv),
// streamed == non-streamed, PD (router ▸ decode ▸ prefill) == monolithic; a call cut by
// max_tokens comes back with finish_reason "length" and no call syntax as content.
// (That the prompt is the template's own rendering with the tools is checked against
// llama.cpp's renderings in tests/unit/server_tool_syntax_test.cc.)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { freePort, waitHealthy } from './helpers.mjs';
import OpenAI from 'openai';
import Ajv from 'ajv';

const BIN = process.env.PDSERVE_BIN ?? 'build/pdserve';
const MODEL = '../shared/models/synth-qwen2-small-q8_0.gguf';
const NAME = 'synth-qwen2-small-q8_0';
const T = '../shared/templates/';
const SYNTAXES = {
  hermes: { template: `${T}Qwen-Qwen2.5-7B-Instruct.jinja`, parallel: true, marker: '<tool_call>' },
  llama3: { template: `${T}meta-llama-Llama-3.1-8B-Instruct.jinja`, parallel: false, marker: '"parameters"' },
  mistral: { template: `${T}mistralai-Mistral-7B-Instruct-v0.3.jinja`, parallel: true, marker: '[TOOL_CALLS]' },
};
const procs = [];
const clients = {};
let pd;

function start(args) {
  const extra = args[0] === 'router' ? [] : ['--threads', '1'];
  const p = spawn(BIN, [...args, '--log-level', 'warn', ...extra], { stdio: ['ignore', 'inherit', 'inherit'] });
  procs.push(p);
  return p;
}

async function serve(template) {
  const port = await freePort();
  start(['serve', '--model', MODEL, '--port', String(port), '--chat-template-file', template]);
  const base = `http://127.0.0.1:${port}`;
  await waitHealthy(base);
  return new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0 });
}

before(async () => {
  const names = Object.keys(SYNTAXES);
  const made = await Promise.all(names.map((n) => serve(SYNTAXES[n].template)));
  names.forEach((n, i) => { clients[n] = made[i]; });
  // PD with the Llama 3.1 template: the router renders the prompt and builds the grammar.
  const [pp, dp, rp] = await Promise.all([freePort(), freePort(), freePort()]);
  start(['prefill', '--model', MODEL, '--port', String(pp)]);
  start(['decode', '--model', MODEL, '--port', String(dp), '--prefill', `127.0.0.1:${pp}`, '--remote-prefill-threshold', '0']);
  start(['router', '--model', MODEL, '--port', String(rp), '--decode', `127.0.0.1:${dp}`,
         '--chat-template-file', SYNTAXES.llama3.template]);
  await waitHealthy(`http://127.0.0.1:${rp}`);
  pd = new OpenAI({ baseURL: `http://127.0.0.1:${rp}/v1`, apiKey: 'unused', maxRetries: 0 });
});

after(() => {
  for (const p of procs) p.kill('SIGTERM');
});

const ajv = new Ajv({ strict: false });
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
const validators = Object.fromEntries(tools.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));

async function streamed(client, params) {
  const s = await client.chat.completions.create({ ...params, stream: true });
  const calls = [];
  let content = '';
  let finish = null;
  for await (const ch of s) {
    content += ch.choices[0]?.delta?.content ?? '';
    for (const d of ch.choices[0]?.delta?.tool_calls ?? []) {
      calls[d.index] ??= { name: '', arguments: '' };
      calls[d.index].name += d.function?.name ?? '';
      calls[d.index].arguments += d.function?.arguments ?? '';
    }
    finish = ch.choices[0]?.finish_reason ?? finish;
  }
  return { content, calls, finish };
}

const simple = (msg) => (msg.tool_calls ?? []).map((t) => ({ name: t.function.name, arguments: t.function.arguments }));

for (const [syntax, info] of Object.entries(SYNTAXES)) {
  test(`${syntax}: tool_choice required / named give calls that validate; streamed == not`, async () => {
    const client = clients[syntax];
    let complete = 0;
    for (let seed = 0; seed < 3; seed++) {
      for (const choice of ['required', { type: 'function', function: { name: 'get_time' } }]) {
        const p = {
          model: NAME, max_tokens: 80, messages: [{ role: 'user', content: 'What is the weather in Oslo?' }], tools,
          tool_choice: choice, ...(seed === 0 ? { temperature: 0 } : { temperature: 1, seed }),
        };
        const res = await client.chat.completions.create(p);
        const c = res.choices[0];
        const what = `${syntax} seed ${seed} ${JSON.stringify(choice)}: ${JSON.stringify(c.message)}`;
        assert.equal(c.message.content, null, what);
        const s = await streamed(client, p);
        assert.equal(s.finish, c.finish_reason, what);
        assert.equal(s.content, '', what);
        assert.deepEqual(s.calls, simple(c.message), what);
        if (c.finish_reason === 'length') continue;
        assert.equal(c.finish_reason, 'tool_calls', what);
        assert.ok(c.message.tool_calls.length >= 1, what);
        if (!info.parallel) assert.equal(c.message.tool_calls.length, 1, what);
        for (const t of c.message.tool_calls) {
          // Mistral's: 9 letters and digits (Nemo's template refuses others when they come back).
          assert.match(t.id, syntax === 'mistral' ? /^[A-Za-z0-9]{9}$/ : /^call_/, what);
          if (choice.function) assert.equal(t.function.name, 'get_time', what);
          const v = validators[t.function.name];
          assert.ok(v, what);
          assert.ok(v(JSON.parse(t.function.arguments)), `${what}: ${ajv.errorsText(v.errors)}`);
        }
        complete++;
      }
    }
    assert.ok(complete >= 2, `only ${complete} complete calls`);
  });
}

test('a call cut by max_tokens: finish_reason length, the call begun so far, no syntax as content', async () => {
  for (const [syntax, info] of Object.entries(SYNTAXES)) {
    for (const max_tokens of [3, 9, 16]) {
      const p = {
        model: NAME, max_tokens, temperature: 0, tools, tool_choice: 'required',
        messages: [{ role: 'user', content: 'What is the weather in Oslo?' }],
      };
      const res = await clients[syntax].chat.completions.create(p);
      const c = res.choices[0];
      const what = `${syntax} max_tokens ${max_tokens}: ${JSON.stringify(c.message)}`;
      assert.equal(c.finish_reason, 'length', what);
      assert.equal(c.message.content, null, what);
      for (const t of c.message.tool_calls ?? []) assert.ok(validators[t.function.name], what);
      assert.ok(!JSON.stringify(c.message).includes(info.marker), what);
      const s = await streamed(clients[syntax], p);
      assert.equal(s.finish, 'length');
      assert.equal(s.content, '');
      assert.deepEqual(s.calls, simple(c.message), what);
    }
  }
});

test('PD == monolithic with the Llama 3.1 syntax', async () => {
  for (let seed = 0; seed < 2; seed++) {
    const p = {
      model: NAME, max_tokens: 80, messages: [{ role: 'user', content: 'Time in Paris?' }], tools, tool_choice: 'required',
      ...(seed === 0 ? { temperature: 0 } : { temperature: 1, seed }),
    };
    const mono = await clients.llama3.chat.completions.create(p);
    const viaPd = await pd.chat.completions.create(p);
    assert.equal(viaPd.choices[0].finish_reason, mono.choices[0].finish_reason);
    assert.deepEqual(simple(viaPd.choices[0].message), simple(mono.choices[0].message));
  }
});

// Logprobs with tools: a text answer carries them streamed as whole (the same entries, each
// with its text); a call carries none either way.
async function streamedLogprobs(client, params) {
  const s = await client.chat.completions.create({ ...params, stream: true });
  let content = '';
  let calls = 0;
  const lps = [];
  for await (const ch of s) {
    const c = ch.choices[0];
    if (!c) continue;
    content += c.delta?.content ?? '';
    calls += (c.delta?.tool_calls ?? []).length;
    for (const e of c.logprobs?.content ?? []) lps.push(e);
  }
  return { content, calls, lps };
}

test('logprobs with tools: a text answer has the same logprobs streamed or not, a call has none', async () => {
  let texts = 0;
  let callsSeen = 0;
  for (const [syntax, client] of [...Object.entries(clients), ['pd', pd]]) {
    for (let seed = 0; seed < 4; seed++) {
      for (const tool_choice of ['auto', 'none', 'required']) {
        const p = {
          model: NAME, max_tokens: 24, messages: [{ role: 'user', content: 'Say hello, or check the weather in Oslo.' }],
          tools, tool_choice, logprobs: true, top_logprobs: 2, ...(seed === 0 ? { temperature: 0 } : { temperature: 1, seed }),
        };
        const res = await client.chat.completions.create(p);
        const c = res.choices[0];
        const s = await streamedLogprobs(client, p);
        const what = `${syntax} seed ${seed} ${tool_choice}: ${JSON.stringify(c.message)}`;
        if (c.message.content === null) {
          callsSeen++;
          assert.equal(c.logprobs, null, what);
          assert.deepEqual(s.lps, [], what);
          assert.equal(s.content, '', what);
          continue;
        }
        texts++;
        assert.equal(s.content, c.message.content, what);
        assert.equal(s.calls, 0, what);
        assert.ok(c.logprobs.content.length > 0, what);
        const bytes = Buffer.from(c.logprobs.content.flatMap((e) => e.bytes));
        assert.equal(bytes.toString('utf8'), c.message.content, `${what}: the logprobs spell the text`);
        assert.deepEqual(s.lps, c.logprobs.content, what);
      }
    }
  }
  assert.ok(texts >= 4 && callsSeen >= 4, `texts ${texts}, calls ${callsSeen}: both kinds must be covered`);
});
