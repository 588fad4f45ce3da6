import { pipeline } from 'node:stream';
import type { Request, Response } from 'express';
import type { ByteRange, StoredObject } from '../../core/ports.ts';
import { sendError } from './errors.ts';

/**
 * Serves a stored object (a signed file or result link) as HTTP wants a download served,
 * streamed, never read whole into memory:
 *
 * - `Content-Length`, a strong `ETag`, `Last-Modified`, `Accept-Ranges: bytes`, on every answer;
 * - `If-None-Match` / `If-Modified-Since` (express's `req.fresh`, the `fresh` package) → 304;
 * - one byte range (`Range: bytes=0-99`, `bytes=100-`, `bytes=-100`; express's `req.range`, the
 *   `range-parser` package) → 206 with `Content-Range`; a range past the end → 416 with
 *   `Content-Range: bytes *\/size`; a malformed Range header, another unit, or several ranges
 *   that do not merge into one → the whole object, 200 (what express's `send` does: a Range
 *   header may be ignored, RFC 9110 §14.2); `If-Range` with another validator → 200 whole;
 * - HEAD: the same headers, no bytes, and no read of the storage at all.
 *
 * The bytes go through `stream.pipeline`: a client that goes away destroys the storage stream
 * (closing its file or S3 connection), and a storage error mid-stream destroys the response
 * (the client sees a body shorter than its Content-Length), never an unhandled 'error' and
 * never a status after the headers went out.
 */
export function sendStoredObject(req: Request, res: Response, object: StoredObject): void {
  const { size } = object;
  res.setHeader('Accept-Ranges', 'bytes');
  res.setHeader('ETag', object.etag);
  res.setHeader('Last-Modified', object.lastModified.toUTCString());

  if (req.fresh) {
    res.removeHeader('Content-Type');
    res.removeHeader('Content-Disposition');
    res.status(304).end();
    return;
  }

  let range: ByteRange | undefined;
  const header = req.headers.range;
  if (header !== undefined && ifRangeHolds(req, object)) {
    const parsed = parseRange(header, size, req);
    if (parsed === 'unsatisfiable') {
      res.removeHeader('Content-Disposition');
      res.status(416).setHeader('Content-Range', `bytes */${size}`);
      sendError(res, 416, 'invalid_request_error', 'range_not_satisfiable', `The requested range is not within the ${size} bytes of this object.`);
      return;
    }
    range = parsed;
  }

  if (range) {
    res.status(206);
    res.setHeader('Content-Range', `bytes ${range.start}-${range.end}/${size}`);
    res.setHeader('Content-Length', String(range.end - range.start + 1));
  } else {
    res.status(200);
    res.setHeader('Content-Length', String(size));
  }
  if (req.method === 'HEAD' || size === 0) {
    res.end();
    return;
  }
  const body = object.stream(range);
  pipeline(body, res, (err) => {
    // The response is destroyed already (pipeline does it); what is left is to say why.
    if (err && !isClientGone(err, res)) req.log?.warn({ err }, 'download broke off: the storage stream failed');
  });
}

/**
 * The one range to serve, 'unsatisfiable', or undefined to serve the whole object (no usable
 * Range header: malformed, not bytes, or several disjoint ranges).
 */
function parseRange(header: string, size: number, req: Request): ByteRange | 'unsatisfiable' | undefined {
  // RFC 9110 §14.1.2: a suffix longer than the object means the whole object (range-parser
  // would call it unsatisfiable).
  const suffix = /^\s*bytes\s*=\s*-\s*(\d+)\s*$/i.exec(header);
  if (suffix && Number(suffix[1]) >= size && size > 0) return { start: 0, end: size - 1 };
  const ranges = req.range(size, { combine: true });
  if (ranges === undefined || ranges === -2) return undefined;
  if (ranges === -1) return 'unsatisfiable';
  if (ranges.type !== 'bytes' || ranges.length !== 1) return undefined;
  const [only] = ranges;
  return { start: only!.start, end: only!.end };
}

/** RFC 9110 §13.1.5: a Range applies only while If-Range (an entity tag, strongly compared, or a date) still names this object. */
function ifRangeHolds(req: Request, object: StoredObject): boolean {
  const ifRange = req.get('if-range');
  if (ifRange === undefined) return true;
  const value = ifRange.trim();
  if (value.startsWith('"') || value.startsWith('W/')) return value === object.etag;
  const date = Date.parse(value);
  // Last-Modified has whole seconds: the object is unchanged if it is no newer than that date.
  return !Number.isNaN(date) && Math.floor(object.lastModified.getTime() / 1000) * 1000 <= date;
}

function isClientGone(err: NodeJS.ErrnoException, res: Response): boolean {
  return err.code === 'ERR_STREAM_PREMATURE_CLOSE' || (res.destroyed && !res.writableFinished && err.code === 'ECONNRESET');
}
