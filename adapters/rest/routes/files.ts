import { createHash, randomBytes } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { Transform } from 'node:stream';
import busboy from 'busboy';
import { Router, type Request } from 'express';
import type { CoreDeps } from '../../../core/context.ts';
import { MAX_UPLOAD_BYTES, type SpooledUpload } from '../../../core/files/files.ts';
import { callApi, publicCaller } from '../caller.ts';
import { sendError, sendHttpError } from '../errors.ts';
import { route } from './route.ts';

class UploadError extends Error {
  readonly status: number;
  readonly code: string;
  constructor(status: number, code: string, message: string) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/**
 * Streams the multipart field `file` to a temporary file through busboy, never holding it in
 * memory, counting and hashing it on the way. Over 50 MB: 413, and the partial file is gone.
 */
function spoolUpload(req: Request, dir: string): Promise<SpooledUpload> {
  return new Promise((resolve, reject) => {
    let parser: busboy.Busboy;
    try {
      parser = busboy({ headers: req.headers, limits: { fileSize: MAX_UPLOAD_BYTES, files: 1, fields: 10, parts: 20 } });
    } catch {
      reject(new UploadError(400, 'invalid_multipart', "Send the file as multipart/form-data in a field named 'file'."));
      return;
    }
    let spooled: Promise<SpooledUpload> | undefined;
    parser.on('file', (field, stream, info) => {
      if (field !== 'file' || spooled) {
        stream.resume();
        return;
      }
      const target = path.join(dir, `upload-${randomBytes(8).toString('hex')}`);
      const hash = createHash('sha256');
      let bytes = 0;
      const count = new Transform({
        transform(chunk: Buffer, _enc, done) {
          bytes += chunk.length;
          hash.update(chunk);
          done(null, chunk);
        },
      });
      spooled = (async () => {
        try {
          await pipeline(stream, count, createWriteStream(target, { mode: 0o600 }));
        } catch (err) {
          await fs.rm(target, { force: true });
          throw err;
        }
        return { path: target, filename: (info.filename || 'upload').slice(0, 255), bytes, sha256: hash.digest('hex') };
      })();
      spooled.then(resolve, reject);
      // Over the limit: stop reading the request at once; the pipeline fails and the partial file is removed.
      stream.once('limit', () => {
        req.unpipe(parser);
        stream.destroy(new UploadError(413, 'file_too_large', `The file is larger than the ${MAX_UPLOAD_BYTES / 1024 / 1024} MB limit.`));
      });
    });
    parser.once('error', () => reject(new UploadError(400, 'invalid_multipart', 'The multipart body could not be read.')));
    parser.once('close', () => {
      if (!spooled) reject(new UploadError(400, 'missing_field', "Missing required parameter: 'file' (a multipart form field)."));
    });
    req.pipe(parser);
  });
}

export function fileRoutes(deps: CoreDeps, opts: { spoolDir?: string } = {}): Router {
  const router = Router();
  const spoolDir = opts.spoolDir ?? os.tmpdir();
  route(router, '/files', {
    post: async (req, res) => {
      let upload: SpooledUpload;
      try {
        // Authenticate first: an anonymous client must not make us read 50 MB.
        await callApi(deps, req, res, (core) => core.keys.whoami());
        upload = await spoolUpload(req, spoolDir);
      } catch (err) {
        if (!(err instanceof UploadError)) throw err;
        res.setHeader('Connection', 'close');
        if (err.status === 413) sendHttpError(res, 'request_too_large', err.message);
        else sendError(res, err.status, 'invalid_request_error', err.code, err.message);
        return;
      }
      try {
        const result = await callApi(deps, req, res, (core) => core.files.create({ upload, idempotency_key: req.get('idempotency-key') }));
        if (result.replayed) res.setHeader('Idempotent-Replayed', 'true');
        res.status(result.status).json(result.body);
      } finally {
        await fs.rm(upload.path, { force: true });
      }
    },
  });
  route(router, '/files/:id', {
    get: async (req, res) => {
      res.json(await callApi(deps, req, res, (core) => core.files.get({ id: String(req.params.id) })));
    },
  });
  route(router, '/files/:id/content', {
    get: async (req, res) => {
      const out = await publicCaller(deps, req).files.content({ id: String(req.params.id), expires: req.query.expires, signature: req.query.signature });
      res.setHeader('Content-Type', out.mimeType);
      res.setHeader('Content-Disposition', `inline; filename="${out.filename.replace(/["\\\r\n]/g, '_')}"`);
      res.send(Buffer.from(out.bytes));
    },
  });
  return router;
}
