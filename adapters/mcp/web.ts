import type { Request as ExpressRequest, Response as ExpressResponse } from 'express';
import { drained } from '../http/drained.ts';

/**
 * Node's request and response as the web-standard Request and Response that both MCP SDK
 * bindings answer with (the v1 SDK's own Node transport does the same through @hono/node-server;
 * the v2 SDK leaves it to `@modelcontextprotocol/node`, which this small pair stands in for).
 * The body is not read here: it streams into the Request, and the SDK reads it under its own
 * size limit. The Request's signal aborts when the client goes away before the answer ends.
 *
 * `release()` is called once the SDK has its answer: whatever of the body it did not read (a
 * body over its limit, answered 413; an answer given before the body was read) is read and
 * dropped, as REST's body parser does, so that a client still writing it on a kept-alive
 * connection gets to read the answer and send its next request. Without it, the request
 * stays paused, the client stays blocked writing, and both wait for a timeout.
 */
export function toWebRequest(req: ExpressRequest, res: ExpressResponse): { request: globalThis.Request; release(): void } {
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
  const body = hasBody ? bodyOf(req) : undefined;
  const request = new Request(`http://${req.headers.host ?? 'localhost'}${req.originalUrl}`, {
    method: req.method,
    headers,
    signal: gone.signal,
    ...(body ? { body: body.stream, duplex: 'half' } : {}),
  } as RequestInit);
  return { request, release: () => body?.release() };
}

/**
 * The request's body as a web stream, read as the reader asks for it (backpressure: the request
 * pauses while the stream's queue is full). `release` detaches the stream and lets the rest of
 * the body flow to nowhere.
 */
function bodyOf(req: ExpressRequest): { stream: ReadableStream<Uint8Array>; release(): void } {
  let released = false;
  let sink: ReadableStreamDefaultController<Uint8Array> | undefined;
  const onData = (chunk: Buffer) => {
    sink!.enqueue(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength));
    if ((sink!.desiredSize ?? 0) <= 0) req.pause();
  };
  const onEnd = () => {
    detach();
    try {
      sink!.close();
    } catch {
      // Already closed or errored by its reader.
    }
  };
  const onError = (err: Error) => {
    detach();
    try {
      sink!.error(err);
    } catch {
      // Already closed.
    }
  };
  const detach = () => {
    req.off('data', onData);
    req.off('end', onEnd);
    req.off('error', onError);
  };
  const release = () => {
    if (released) return;
    released = true;
    detach();
    try {
      sink?.close();
    } catch {
      // Already closed or errored.
    }
    // No 'data' listener is left: the rest of the body is read and dropped.
    if (!req.complete) req.resume();
  };
  const stream = new ReadableStream<Uint8Array>(
    {
      start(controller) {
        sink = controller;
        req.on('data', onData);
        req.on('end', onEnd);
        req.on('error', onError);
        req.pause();
      },
      pull() {
        if (!released) req.resume();
      },
      cancel() {
        release();
      },
    },
    { highWaterMark: 64 * 1024, size: (chunk) => chunk.byteLength },
  );
  return { stream, release };
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
