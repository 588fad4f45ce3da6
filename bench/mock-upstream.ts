import http from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A mock OpenAI-compatible upstream that answers at once: the same fixed answer for every
 * request, streamed (with a usage chunk) or not. Both gateways in the benchmark point at it.
 */
const CONTENT = ['The', ' ledger', ' balances', '.'];

export async function startMockUpstream(port = 0): Promise<{ url: string; close(): Promise<void> }> {
  const server = http.createServer((req, res) => {
    let raw = '';
    req.on('data', (c: Buffer) => (raw += c.toString()));
    req.on('end', () => {
      let stream = false;
      let model = 'mock';
      try {
        const body = JSON.parse(raw) as { stream?: boolean; model?: string };
        stream = body.stream === true;
        model = body.model ?? model;
      } catch {
        // an unreadable body gets the plain answer
      }
      const base = { id: 'chatcmpl-mock', created: 1, model };
      const usage = { prompt_tokens: 12, completion_tokens: CONTENT.length, total_tokens: 12 + CONTENT.length };
      if (!stream) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ ...base, object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content: CONTENT.join('') }, finish_reason: 'stop' }], usage }));
        return;
      }
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      CONTENT.forEach((c, i) => res.write(`data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', choices: [{ index: 0, delta: i === 0 ? { role: 'assistant', content: c } : { content: c }, finish_reason: null }] })}\n\n`));
      res.write(`data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] })}\n\n`);
      res.write(`data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', choices: [], usage })}\n\n`);
      res.end('data: [DONE]\n\n');
    });
  });
  server.keepAliveTimeout = 65_000;
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, close: () => new Promise((r) => server.close(() => r())) };
}

// Run alone (a separate process, so it does not share the load generator's event loop).
if (process.argv[1]?.endsWith('mock-upstream.ts')) {
  const mock = await startMockUpstream(Number(process.argv[2] ?? 0));
  process.stdout.write(`${mock.url}\n`);
}
