import { Router } from 'express';
import type { CoreDeps } from '../../../core/context.ts';
import { callApi, publicCaller } from '../caller.ts';
import { jsonObject } from '../body.ts';
import { sendStoredObject } from '../download.ts';
import { route } from './route.ts';

export function generationRoutes(deps: CoreDeps): Router {
  const router = Router();
  route(router, '/generations', {
    // The account's jobs, newest first, in the OpenAI list envelope (`limit`, `starting_after`, `status`).
    get: async (req, res) => {
      res.json(await callApi(deps, req, res, (core) => core.generations.list(req.query as never)));
    },
    post: async (req, res) => {
      // RFC 7240: `Prefer: wait=N`; a preference we do not understand is ignored.
      const wait = /(?:^|[\s,;])wait=(\d{1,6})(?:$|[\s,;])/.exec(req.get('prefer') ?? '');
      const { generation, replayed } = await callApi(deps, req, res, (core) =>
        core.generations.create({ ...jsonObject(req.body), idempotency_key: req.get('idempotency-key'), wait_seconds: wait ? Number(wait[1]) : undefined } as never),
      );
      if (wait) res.setHeader('Preference-Applied', `wait=${wait[1]}`);
      if (replayed) res.setHeader('Idempotent-Replayed', 'true');
      // 202 while the job runs; 200 when `Prefer: wait` saw it end.
      res.status(generation.status === 'queued' || generation.status === 'running' ? 202 : 200).json(generation);
    },
  });
  route(router, '/generations/:id', {
    get: async (req, res) => {
      res.json(await callApi(deps, req, res, (core) => core.generations.get({ id: String(req.params.id) })));
    },
  });
  route(router, '/generations/:id/cancel', {
    post: async (req, res) => {
      res.json(await callApi(deps, req, res, (core) => core.generations.cancel({ id: String(req.params.id) })));
    },
  });
  route(router, '/webhook_secret', {
    get: async (req, res) => {
      res.json(await callApi(deps, req, res, (core) => core.webhooks.secret()));
    },
  });
  // A signed result link: no API key; the signature and expiry are the credential.
  route(router, '/generations/:id/output', {
    get: async (req, res) => {
      const out = await publicCaller(deps, req).generations.output({ id: String(req.params.id), expires: req.query.expires, signature: req.query.signature });
      res.setHeader('Content-Type', out.mimeType);
      res.setHeader('Content-Disposition', `inline; filename="${out.filename}"`);
      res.setHeader('Cache-Control', 'private, max-age=300');
      // The signature is the only credential (no cookie), so other origins may read it: the MCP
      // Apps result viewer shows it from a host's sandboxed frame (adapters/mcp/apps/).
      res.setHeader('Access-Control-Allow-Origin', '*');
      res.setHeader('Cross-Origin-Resource-Policy', 'cross-origin');
      // Streamed from storage, with Range, ETag and HEAD (adapters/rest/download.ts).
      sendStoredObject(req, res, out.object);
    },
  });
  return router;
}
