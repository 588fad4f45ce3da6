import http from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A fake of Anthropic's Messages API (`POST /v1/messages`), from its public API reference:
 * it checks `x-api-key` and `anthropic-version`, refuses a body Anthropic would refuse (an
 * unknown field, roles that do not alternate, an empty text block, a tool_result whose
 * tool_use the previous assistant turn does not hold, a temperature above 1) with Anthropic's
 * error body `{type: 'error', error: {type, message}}`, and streams as Anthropic does:
 * message_start, content_block_start, ping, content_block_delta, content_block_stop,
 * message_delta, message_stop. The model name picks the behaviour:
 *   claude-ok        "Hello from Claude" in three text deltas, end_turn, usage 25 in / 7 out
 *   claude-cache     the same, input 10 + cache_creation 4 + cache_read 6
 *   claude-stop      "Count: 1, 2", stop_sequence;  claude-max: max_tokens;  claude-refusal: refusal
 *   claude-tools     a text block, then get_weather and get_time tool_use blocks (input in
 *                    pieces), tool_use; after tool results, text quoting them, end_turn
 *   claude-schema    the forced tool's input in pieces, tool_use (structured output)
 *   claude-oversized 400 text deltas and usage of 100000 output tokens
 *   claude-error-mid text, then an `error` event (overloaded_error)
 *   claude-malformed message_start, then an event whose data is not JSON
 *   claude-hang      never answers;  claude-stall: one text delta, then silence
 *   claude-ping      message_start, then a `ping` event every 5 ms, never a token
 *   claude-reset     drops the connection before answering
 *   claude-429       429 rate_limit_error with retry-after 7 and anthropic-ratelimit-* headers
 *   status-<code>    that status with Anthropic's error type for it (status-400-policy: a
 *                    content-filtering invalid_request_error)
 */
export interface FakeAnthropic {
  url: string;
  /** The bodies it was sent, in order. */
  requests: Record<string, unknown>[];
  headers: http.IncomingHttpHeaders[];
  /** Answers whose client went away before the fake had finished them. */
  aborted: number;
  /** TCP connections opened to the fake so far (keep-alive reuses them). */
  connections: number;
  close(): Promise<void>;
}

export const ANTHROPIC_FAKE_KEY = 'sk-ant-fake-key';

const ERROR_TYPES: Record<number, string> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  402: 'billing_error',
  403: 'permission_error',
  404: 'not_found_error',
  413: 'request_too_large',
  429: 'rate_limit_error',
  500: 'api_error',
  504: 'timeout_error',
  529: 'overloaded_error',
};
const FIELDS = new Set(['model', 'messages', 'max_tokens', 'system', 'stop_sequences', 'temperature', 'top_p', 'top_k', 'metadata', 'tools', 'tool_choice', 'stream', 'thinking', 'service_tier']);

export async function startFakeAnthropic(): Promise<FakeAnthropic> {
  const state = { requests: [] as Record<string, unknown>[], headers: [] as http.IncomingHttpHeaders[], aborted: 0, connections: 0 };
  const sockets = new Set<import('node:net').Socket>();
  const server = http.createServer((req, res) => {
    let raw = '';
    req.on('data', (c: Buffer) => (raw += c.toString()));
    req.on('end', () => {
      const fail = (status: number, message: string, extra: Record<string, string> = {}) =>
        res
          .writeHead(status, { 'content-type': 'application/json', 'request-id': 'req_fake', ...extra })
          .end(JSON.stringify({ type: 'error', error: { type: ERROR_TYPES[status] ?? 'api_error', message } }));
      if (req.method !== 'POST' || req.url !== '/v1/messages') return fail(404, `Not found: ${req.method} ${req.url}`);
      let body: Record<string, unknown>;
      try {
        body = JSON.parse(raw) as Record<string, unknown>;
      } catch {
        return fail(400, 'The request body is not valid JSON.');
      }
      state.requests.push(body);
      state.headers.push(req.headers);
      if (req.headers['x-api-key'] !== ANTHROPIC_FAKE_KEY) return fail(401, 'invalid x-api-key');
      if (req.headers['anthropic-version'] !== '2023-06-01') return fail(400, 'anthropic-version: header is required');
      const invalid = invalidBody(body);
      if (invalid) return fail(400, invalid);
      res.on('close', () => {
        if (!res.writableFinished) state.aborted++;
      });
      void answer(String(body.model), body, res, fail);
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
    url: `http://127.0.0.1:${port}`,
    requests: state.requests,
    headers: state.headers,
    get aborted() {
      return state.aborted;
    },
    get connections() {
      return state.connections;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** What Anthropic would refuse in a body: the reason, or undefined. */
function invalidBody(body: Record<string, unknown>): string | undefined {
  for (const key of Object.keys(body)) if (!FIELDS.has(key)) return `${key}: Extra inputs are not permitted`;
  if (typeof body.model !== 'string') return 'model: Field required';
  if (!Number.isInteger(body.max_tokens) || (body.max_tokens as number) < 1) return 'max_tokens: Field required';
  if (body.system !== undefined && typeof body.system !== 'string') return 'system: Input should be a valid string';
  if (typeof body.temperature === 'number' && (body.temperature < 0 || body.temperature > 1)) return 'temperature: Input should be less than or equal to 1';
  if (body.stream !== true) return 'this fake only streams';
  const messages = body.messages as { role: string; content: { type: string; text?: string; id?: string; tool_use_id?: string }[] }[];
  if (!Array.isArray(messages) || messages.length === 0) return 'messages: at least one message is required';
  let previous: (typeof messages)[number] | undefined;
  for (const [i, m] of messages.entries()) {
    if (m.role !== 'user' && m.role !== 'assistant') return `messages.${i}.role: Input should be 'user' or 'assistant'`;
    if (previous?.role === m.role) return 'messages: roles must alternate between "user" and "assistant"';
    if (!Array.isArray(m.content) || m.content.length === 0) return `messages.${i}: all messages must have non-empty content`;
    for (const block of m.content) {
      if (block.type === 'text' && !block.text) return `messages.${i}: text content blocks must be non-empty`;
      if (block.type === 'tool_result' && !previous?.content.some((b) => b.type === 'tool_use' && b.id === block.tool_use_id)) {
        return `messages.${i}: unexpected tool_use_id found in tool_result blocks: ${block.tool_use_id}`;
      }
    }
    previous = m;
  }
  return undefined;
}

type Fail = (status: number, message: string, extra?: Record<string, string>) => void;

async function answer(model: string, body: Record<string, unknown>, res: http.ServerResponse, fail: Fail) {
  const send = (type: string, data: Record<string, unknown>) => res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`);
  const start = (usage: Record<string, number> = { input_tokens: 25, output_tokens: 1 }) => {
    res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', 'request-id': 'req_fake' });
    send('message_start', {
      message: { id: 'msg_fake01', type: 'message', role: 'assistant', content: [], model, stop_reason: null, stop_sequence: null, usage },
    });
  };
  const text = (index: number, pieces: string[]) => {
    send('content_block_start', { index, content_block: { type: 'text', text: '' } });
    if (index === 0) send('ping', {});
    for (const piece of pieces) send('content_block_delta', { index, delta: { type: 'text_delta', text: piece } });
    send('content_block_stop', { index });
  };
  const toolUse = (index: number, id: string, name: string, pieces: string[]) => {
    send('content_block_start', { index, content_block: { type: 'tool_use', id, name, input: {} } });
    for (const piece of pieces) send('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: piece } });
    send('content_block_stop', { index });
  };
  const end = (stopReason: string, outputTokens: number) => {
    send('message_delta', { delta: { stop_reason: stopReason, stop_sequence: null }, usage: { output_tokens: outputTokens } });
    send('message_stop', {});
    res.end();
  };

  const status = /^status-(\d{3})(-policy)?$/.exec(model);
  if (status) {
    const code = Number(status[1]);
    return fail(code, status[2] ? 'Output blocked by content filtering policy' : `scripted ${ERROR_TYPES[code] ?? 'error'} (upstream detail sk-ant-secret-detail)`);
  }
  switch (model) {
    case 'claude-ok':
      start();
      text(0, ['Hello', ' from', ' Claude']);
      return end('end_turn', 7);
    case 'claude-cache':
      start({ input_tokens: 10, cache_creation_input_tokens: 4, cache_read_input_tokens: 6, output_tokens: 1 });
      text(0, ['Hello', ' from', ' Claude']);
      return end('end_turn', 7);
    case 'claude-stop':
      start();
      text(0, ['Count: 1, 2']);
      return end('stop_sequence', 5);
    case 'claude-max':
      start();
      text(0, ['Cut sh']);
      return end('max_tokens', 3);
    case 'claude-refusal':
      start();
      return end('refusal', 0);
    case 'claude-tools': {
      const messages = body.messages as { role: string; content: { type: string; content?: unknown }[] }[];
      const results = messages.at(-1)!.content.filter((b) => b.type === 'tool_result');
      start();
      if (results.length > 0) {
        text(0, ['Results: ', results.map((r) => String(r.content)).join(' | ')]);
        return end('end_turn', 9);
      }
      text(0, ['Let me check.']);
      toolUse(1, 'toolu_01weather', 'get_weather', ['{"city": "Pa', 'ris", "unit": "celsius"', ', "days": 2}']);
      toolUse(2, 'toolu_02time', 'get_time', ['']);
      return end('tool_use', 30);
    }
    case 'claude-schema': {
      const choice = body.tool_choice as { type?: string; name?: string } | undefined;
      start();
      toolUse(0, 'toolu_03answer', choice?.name ?? 'answer', ['{"city": "Paris",', ' "temperature": 21}']);
      return end('tool_use', 12);
    }
    case 'claude-oversized':
      start();
      text(0, Array.from({ length: 400 }, () => ' word'));
      return end('end_turn', 100_000);
    case 'claude-error-mid':
      start();
      text(0, ['Partial']);
      send('error', { error: { type: 'overloaded_error', message: 'Overloaded (upstream detail sk-ant-secret-detail)' } });
      return res.end();
    case 'claude-malformed':
      start();
      res.write('event: content_block_start\ndata: {"type":"content_block_start","index":0,\n\n');
      return res.end();
    case 'claude-hang':
      return; // never answers: the client must time out
    case 'claude-stall':
      start();
      send('content_block_start', { index: 0, content_block: { type: 'text', text: '' } });
      send('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'Partial' } });
      return; // and then silence
    case 'claude-ping': {
      start();
      // Anthropic's keep-alive until the client goes away: the stream never looks idle.
      const timer = setInterval(() => send('ping', {}), 5);
      res.on('close', () => clearInterval(timer));
      return;
    }
    case 'claude-reset':
      res.socket?.destroy();
      return;
    case 'claude-429':
      return fail(429, 'Number of request tokens has exceeded your per-minute rate limit', {
        'retry-after': '7',
        'anthropic-ratelimit-requests-limit': '50',
        'anthropic-ratelimit-requests-remaining': '0',
        'anthropic-ratelimit-requests-reset': new Date(Date.now() + 7000).toISOString(),
        'anthropic-ratelimit-tokens-limit': '40000',
        'anthropic-ratelimit-tokens-remaining': '0',
      });
    default:
      return fail(404, `model: ${model}`);
  }
}
