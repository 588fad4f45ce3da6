import http from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A fake model provider speaking the OpenAI chat-completions protocol (plain and SSE), for
 * driving the openai-compatible adapter through every path. The upstream model name picks
 * the behaviour:
 *   ok            3 chunks, finish "stop", usage {prompt 11, completion 5}
 *   no-usage      the same without a usage chunk
 *   over-limit    reports 5000 completion tokens: more than any request's limit, not more than a
 *                 4096-token model's context plus its output limit (so possible, and clamped)
 *   error         HTTP 500 with an OpenAI error body
 *   hang          never sends headers
 *   stall         one chunk, then nothing more
 *   fail-mid      two chunks, then the connection drops
 *   slow          30 chunks, one every 100 ms
 *   echo-body     answers with the JSON body it received
 *   usage:P:C     like ok, but reports usage {prompt P, completion C}
 *   tools         two tool calls streamed in pieces (finish "tool_calls"); after a tool result, text quoting it
 *   rate-limited  HTTP 429 with Retry-After: 1
 *   overloaded    an SSE stream whose first event is an `overloaded_error`
 *   content-policy HTTP 400 with code content_policy_violation
 *   usage-cost    like ok, with OpenRouter's `usage.cost` (USD) in the usage chunk
 *   keep-alive    an SSE stream of `: keep-alive` comments every 5 ms, never a token
 *   keep-alive-after-token  one text chunk, then only keep-alive comments
 *   trickle       a text chunk every 5 ms, never finishing
 *   usage:P:C     (also negative, fractional or exponent numbers: `usage:-5:3.7`, `usage:1e300:2`)
 * `script` overrides the model name for the next requests, in turn (a queue of behaviours).
 */
export interface FakeUpstream {
  url: string;
  requests: Record<string, unknown>[];
  /** Requests whose client went away before the fake had finished answering. */
  aborted: number;
  /** TCP connections opened to the fake so far (keep-alive reuses them). */
  connections: number;
  /** Behaviours for the next requests, taken in turn before the model name decides. */
  script: string[];
  close(): Promise<void>;
}

const WORDS = ['Hello', ' from', ' upstream'];

export async function startFakeUpstream(): Promise<FakeUpstream> {
  const state = { requests: [] as Record<string, unknown>[], aborted: 0, connections: 0, script: [] as string[] };
  const sockets = new Set<import('node:net').Socket>();
  const server = http.createServer((req, res) => {
    let raw = '';
    req.on('data', (c: Buffer) => (raw += c.toString()));
    req.on('end', () => {
      const body = JSON.parse(raw || '{}') as Record<string, unknown>;
      state.requests.push(body);
      if (req.headers.authorization !== 'Bearer upstream-secret') {
        res.writeHead(401, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { message: 'bad upstream key' } }));
        return;
      }
      let finished = false;
      res.on('close', () => {
        if (!finished) state.aborted++;
      });
      const done = () => {
        finished = true;
        res.end();
      };
      void answer(state.script.shift() ?? String(body.model), body, res, done);
    });
  });
  server.on('connection', (s) => {
    state.connections++;
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    get requests() {
      return state.requests;
    },
    get aborted() {
      return state.aborted;
    },
    get connections() {
      return state.connections;
    },
    script: state.script,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

async function answer(model: string, body: Record<string, unknown>, res: http.ServerResponse, done: () => void) {
  const stream = body.stream === true;
  const base = { id: 'chatcmpl-upstream', created: 1, model };
  const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
    `data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
  const usage = (prompt: number, completion: number) =>
    `data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', choices: [], usage: { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion } })}\n\n`;
  const sse = () => res.writeHead(200, { 'content-type': 'text/event-stream' });
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  const reported = /^usage:(-?[\d.e+]+):(-?[\d.e+]+)$/.exec(model);
  const [prompt, completion] = reported ? [Number(reported[1]), Number(reported[2])] : [11, 5];

  switch (model) {
    case 'error':
      res.writeHead(500, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { message: 'the upstream exploded', type: 'server_error' } }));
      return;
    case 'hang':
      return; // never answers; the client must time out
    case 'rate-limited':
      res.writeHead(429, { 'content-type': 'application/json', 'retry-after': '1' }).end(JSON.stringify({ error: { message: 'Rate limit reached for upstream-org-7 on tokens', type: 'requests', code: 'rate_limit_exceeded' } }));
      return done();
    case 'overloaded':
      sse();
      res.write(`data: ${JSON.stringify({ error: { message: 'Overloaded', type: 'overloaded_error' } })}\n\n`);
      return done();
    case 'content-policy':
      res
        .writeHead(400, { 'content-type': 'application/json' })
        .end(JSON.stringify({ error: { message: 'Your request was rejected by safety system sk-upstream-internal-42', type: 'invalid_request_error', code: 'content_policy_violation' } }));
      return done();
    case 'usage-cost':
      sse();
      WORDS.forEach((w, i) => res.write(chunk(i === 0 ? { role: 'assistant', content: w } : { content: w })));
      res.write(chunk({}, 'stop'));
      res.write(`data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', choices: [], usage: { prompt_tokens: 11, completion_tokens: 5, total_tokens: 16, cost: 0.000042 } })}\n\n`);
      res.write('data: [DONE]\n\n');
      return done();
    case 'echo-body': {
      const text = JSON.stringify(body);
      if (!stream) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ ...base, object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content: text }, finish_reason: 'stop' }], usage: { prompt_tokens: 1, completion_tokens: 1 } }));
        return;
      }
      sse();
      res.write(chunk({ role: 'assistant', content: text }));
      res.write(chunk({}, 'stop'));
      res.write(usage(1, 1));
      res.write('data: [DONE]\n\n');
      return done();
    }
    case 'keep-alive':
    case 'keep-alive-after-token':
    case 'trickle': {
      sse();
      if (model === 'keep-alive-after-token') res.write(chunk({ role: 'assistant', content: 'Partial' }));
      // Comments (or tokens) until the client goes away: the connection never looks idle.
      const timer = setInterval(() => res.write(model === 'trickle' ? chunk({ content: ' word' }) : ': keep-alive\n\n'), 5);
      res.on('close', () => clearInterval(timer));
      return;
    }
    case 'stall':
      sse();
      res.write(chunk({ role: 'assistant', content: 'Partial' }));
      return; // and then silence
    case 'tools': {
      // A call of get_weather streamed as OpenAI streams it (the second call's index is 3, as
      // upstreams may number them), unless the last message is a tool result: then text.
      const messages = body.messages as { role: string; content: unknown }[];
      sse();
      if (messages.at(-1)?.role === 'tool') {
        res.write(chunk({ role: 'assistant', content: `Result: ${String(messages.at(-1)!.content)}` }));
        res.write(chunk({}, 'stop'));
      } else {
        const start = (index: number, id: string, name: string) => ({ tool_calls: [{ index, id, type: 'function', function: { name, arguments: '' } }] });
        const args = (index: number, piece: string) => ({ tool_calls: [{ index, function: { arguments: piece } }] });
        res.write(chunk({ role: 'assistant', content: null, ...start(0, 'call_up1', 'get_weather') }));
        res.write(chunk(args(0, '{"city"')));
        res.write(chunk(args(0, ':"Paris"}')));
        res.write(chunk(start(3, 'call_up2', 'get_time')));
        res.write(chunk(args(3, '{}')));
        res.write(chunk({}, 'tool_calls'));
      }
      res.write(usage(prompt, completion));
      res.write('data: [DONE]\n\n');
      return done();
    }
    case 'fail-mid':
      sse();
      res.write(chunk({ role: 'assistant', content: 'Hello' }));
      res.write(chunk({ content: ' from' }));
      await sleep(30);
      res.socket?.destroy();
      return;
    case 'slow':
      sse();
      for (let i = 0; i < 30; i++) {
        if (res.destroyed) return;
        res.write(chunk(i === 0 ? { role: 'assistant', content: 'word' } : { content: ' word' }));
        await sleep(100);
      }
      res.write(chunk({}, 'stop'));
      res.write(usage(11, 30));
      res.write('data: [DONE]\n\n');
      return done();
    default: {
      if (!stream) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ ...base, object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content: WORDS.join('') }, finish_reason: 'stop' }], usage: { prompt_tokens: prompt, completion_tokens: completion } }));
        return done();
      }
      sse();
      WORDS.forEach((w, i) => res.write(chunk(i === 0 ? { role: 'assistant', content: w } : { content: w })));
      res.write(chunk({}, 'stop'));
      if (model === 'ok' || reported) res.write(usage(prompt, completion));
      if (model === 'over-limit') res.write(usage(11, 5000));
      res.write('data: [DONE]\n\n');
      return done();
    }
  }
}
