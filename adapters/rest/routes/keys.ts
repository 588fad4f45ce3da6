import { Router } from 'express';
import type { CoreDeps } from '../../../core/context.ts';
import { jsonObject } from '../body.ts';
import { callApi } from '../caller.ts';
import { route } from './route.ts';

/**
 * The provisioning API's keys (docs/organizations.md): a management key creates, lists, limits,
 * disables and revokes API keys, of the personal wallet or, with `organization_id`, of an
 * organization's, through the same core procedures as the keys page (roles, the 10 keys per
 * member, limits and refusals are core's). An API key for models gets 403 here.
 */
export function managedKeyRoutes(deps: CoreDeps): Router {
  const router = Router();
  route(router, '/keys', {
    // `?organization_id=org_…`: that organization's keys (an admin's: all of them; a member's: their own).
    get: async (req, res) => {
      res.json(await callApi(deps, req, res, (core) => core.account.keys.list(req.query as never)));
    },
    // Every field is optional: no body makes a key named "API key" without limits.
    post: async (req, res) => {
      const key = await callApi(deps, req, res, (core) => core.account.keys.create(jsonObject(req.body ?? {}) as never));
      // The secret is in this answer only: no cache keeps it.
      res.setHeader('Cache-Control', 'no-store');
      res.status(201).json(key);
    },
  });
  route(router, '/keys/:id', {
    get: async (req, res) => {
      res.json(await callApi(deps, req, res, (core) => core.account.keys.get({ id: String(req.params.id) })));
    },
    patch: async (req, res) => {
      res.json(await callApi(deps, req, res, (core) => core.account.keys.update({ ...jsonObject(req.body ?? {}), id: String(req.params.id) } as never)));
    },
    // Revokes the key (401 from its next request on) and answers it, `revoked_at` set; again: the same answer.
    delete: async (req, res) => {
      res.json(await callApi(deps, req, res, (core) => core.account.keys.revoke({ id: String(req.params.id) })));
    },
  });
  return router;
}
