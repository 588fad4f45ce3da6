import fs from 'node:fs/promises';
import os from 'node:os';
import { Router } from 'express';
import type { CoreDeps } from '../../../core/context.ts';
import type { SpooledUpload } from '../../../core/files/files.ts';
import { callApi, publicCaller } from '../caller.ts';
import { sendError, sendHttpError } from '../errors.ts';
import { sendStoredObject } from '../download.ts';
import { spoolUpload, UploadError } from '../multipart.ts';
import { route } from './route.ts';

export function fileRoutes(deps: CoreDeps, opts: { spoolDir?: string | undefined } = {}): Router {
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
        // The body was not read to its end: close the connection after the answer rather than
        // let Node read (and discard) what is left of it.
        res.setHeader('Connection', 'close');
        if (!(err instanceof UploadError)) throw err;
        if (err.status === 413) sendHttpError(res, 'request_too_large', err.message);
        else sendError(res, err.status, 'invalid_request_error', err.code, err.message);
        return;
      }
      try {
        const result = await callApi(deps, req, res, (core) => core.files.create({ upload, idempotency_key: req.get('idempotency-key') }));
        if (result.replayed) res.setHeader('Idempotent-Replayed', 'true');
        res.json(result.file);
      } finally {
        await fs.rm(upload.path, { force: true });
      }
    },
  }, { body: 'any' });
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
      // Streamed from storage, with Range, ETag and HEAD (adapters/rest/download.ts).
      sendStoredObject(req, res, out.object);
    },
  });
  return router;
}
