import type { Response } from 'express';
import type { Logger } from 'pino';
import { toCoreError } from '../../core/trpc.ts';
import { tagErrorCode } from '../http/error-body.ts';
import { coreErrorBody } from './errors.ts';
import { drained } from '../http/drained.ts';

/**
 * Sends chunks as server-sent events, `data: {json}` each, then `data: [DONE]`, as the OpenAI
 * clients expect. The first chunk is awaited before any header goes out, so a failure before
 * any output is still an ordinary error response (502, 504…). A failure after that ends the
 * stream with an error event in the error shape.
 */
export function sendEventStream(res: Response, chunks: AsyncIterable<unknown>, logger: () => Logger): Promise<void> {
  return streamEvents(res, chunks, logger, {
    encode: (chunk) => `data: ${JSON.stringify(chunk)}\n\n`,
    end: 'data: [DONE]\n\n',
    failure: (body) => `data: ${JSON.stringify(body)}\n\n`,
  });
}

/**
 * The Responses API's stream: each event named (`event: response.output_text.delta`) with its
 * JSON, as OpenAI sends them; no `[DONE]` (the last event is `response.completed` or
 * `response.incomplete`). A failure after the first event is an `error` event with the error's
 * code, message and param.
 */
export function sendResponseEventStream(res: Response, events: AsyncIterable<Record<string, unknown>>, logger: () => Logger): Promise<void> {
  let seq = 0;
  return streamEvents(res, events, logger, {
    encode: (event) => {
      const e = event as { type: string; sequence_number: number };
      seq = e.sequence_number + 1;
      return `event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`;
    },
    end: '',
    failure: (body) => {
      const { message, code, param } = body.error as { message: string; code: string; param?: string | null };
      return `event: error\ndata: ${JSON.stringify({ type: 'error', sequence_number: seq, code, message, param: param ?? null })}\n\n`;
    },
  });
}

interface Encoding {
  encode: (chunk: unknown) => string;
  end: string;
  failure: (body: { error: Record<string, unknown> }) => string;
}

/** `logger` is called only to log a failure: the request's child logger is made on first use (adapters/http/logging.ts). */
async function streamEvents(res: Response, chunks: AsyncIterable<unknown>, logger: () => Logger, encoding: Encoding): Promise<void> {
  const it = chunks[Symbol.asyncIterator]();
  let next = await it.next();
  res.status(200);
  res.setHeader('Content-Type', 'text/event-stream; charset=utf-8');
  res.setHeader('Cache-Control', 'no-cache, no-transform');
  res.setHeader('X-Accel-Buffering', 'no');
  res.flushHeaders();
  try {
    while (!next.done) {
      if (res.destroyed) {
        await it.return?.();
        return;
      }
      if (!res.write(encoding.encode(next.value))) await drained(res);
      next = await it.next();
    }
    if (encoding.end) res.write(encoding.end);
  } catch (err) {
    const core = toCoreError(err);
    if (!core) logger().error({ err }, 'stream failed');
    const body = core
      ? coreErrorBody(core).body
      : { error: { message: 'Internal server error.', type: 'server_error', param: null, code: 'internal_error' } };
    // The status is already 200: the request log still says how the stream ended.
    tagErrorCode(res, body.error.code);
    if (!res.destroyed) res.write(encoding.failure(body as unknown as { error: Record<string, unknown> }));
  } finally {
    res.end();
  }
}
