import type { Response } from 'express';
import type { Logger } from 'pino';
import { toCoreError } from '../../core/trpc.ts';
import { tagErrorCode } from '../http/error-body.ts';
import { coreErrorBody } from './errors.ts';

/**
 * Sends chunks as server-sent events, `data: {json}` each, then `data: [DONE]`, as the OpenAI
 * clients expect. The first chunk is awaited before any header goes out, so a failure before
 * any output is still an ordinary error response (502, 504…). A failure after that ends the
 * stream with an error event in the error shape.
 */
export async function sendEventStream(res: Response, chunks: AsyncIterable<unknown>, logger: Logger): Promise<void> {
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
      if (!res.write(`data: ${JSON.stringify(next.value)}\n\n`)) await drained(res);
      next = await it.next();
    }
    res.write('data: [DONE]\n\n');
  } catch (err) {
    const core = toCoreError(err);
    if (!core) logger.error({ err }, 'stream failed');
    const body = core
      ? coreErrorBody(core).body
      : { error: { message: 'Internal server error.', type: 'server_error', param: null, code: 'internal_error' } };
    // The status is already 200: the request log still says how the stream ended.
    tagErrorCode(res, body.error.code);
    if (!res.destroyed) res.write(`data: ${JSON.stringify(body)}\n\n`);
  } finally {
    res.end();
  }
}

function drained(res: Response): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.once('drain', done);
    res.once('close', done);
  });
}
