import { Readable } from 'node:stream';
import type { Request as ExpressRequest, Response as ExpressResponse } from 'express';
import { drained } from '../http/drained.ts';

/**
 * Node's request and response as the web-standard Request and Response that both MCP SDK
 * bindings answer with (the v1 SDK's own Node transport does the same through @hono/node-server;
 * the v2 SDK leaves it to `@modelcontextprotocol/node`, which this small pair stands in for).
 * The body is not read here: it streams into the Request, and the SDK reads it under its own
 * size limit. The Request's signal aborts when the client goes away before the answer ends.
 */
export function toWebRequest(req: ExpressRequest, res: ExpressResponse): globalThis.Request {
  const headers = new Headers();
  for (const [name, value] of Object.entries(req.headers)) {
    if (value === undefined) continue;
    for (const v of Array.isArray(value) ? value : [value]) headers.append(name, v);
  }
  const gone = new AbortController();
  res.once('close', () => {
    if (!res.writableFinished) gone.abort();
  });
  const hasBody = req.method !== 'GET' && req.method !== 'HEAD';
  return new Request(`http://${req.headers.host ?? 'localhost'}${req.originalUrl}`, {
    method: req.method,
    headers,
    signal: gone.signal,
    ...(hasBody ? { body: Readable.toWeb(req) as ReadableStream<Uint8Array>, duplex: 'half' } : {}),
  } as RequestInit);
}

/** Writes a web Response to Node's response, chunk by chunk (server-sent events flow as they come). */
export async function sendWebResponse(res: ExpressResponse, response: globalThis.Response): Promise<void> {
  res.status(response.status);
  response.headers.forEach((value, name) => res.setHeader(name, value));
  if (!response.body) {
    res.end();
    return;
  }
  res.flushHeaders();
  const reader = response.body.getReader();
  res.once('close', () => void reader.cancel().catch(() => undefined));
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (!res.write(value)) await drained(res);
    }
  } catch {
    // The client went away (the reader was cancelled): nothing is left to answer.
  }
  res.end();
}
