import { Router } from 'express';
import type { CoreDeps } from '../../../core/context.ts';
import { jsonObject } from '../body.ts';
import { callApi } from '../caller.ts';
import { route } from './route.ts';

/**
 * The provisioning API's organizations (docs/organizations.md), for a management key: the
 * organizations its person belongs to (a key made for one: that one), their members and
 * invitations. Roles, the last owner and every refusal are core's (core/organizations/); the
 * ids in the path win over any in the body.
 */
export function organizationRoutes(deps: CoreDeps): Router {
  const router = Router();
  route(router, '/organizations', {
    get: async (req, res) => {
      res.json(await callApi(deps, req, res, (core) => core.organizations.list()));
    },
    post: async (req, res) => {
      res.status(201).json(await callApi(deps, req, res, (core) => core.organizations.create(jsonObject(req.body) as never)));
    },
  });
  route(router, '/organizations/:id', {
    get: async (req, res) => {
      res.json(await callApi(deps, req, res, (core) => core.organizations.get({ id: String(req.params.id) })));
    },
    delete: async (req, res) => {
      res.json(await callApi(deps, req, res, (core) => core.organizations.delete({ id: String(req.params.id) })));
    },
  });
  route(router, '/organizations/:id/members', {
    get: async (req, res) => {
      res.json(await callApi(deps, req, res, (core) => core.organizations.members.list({ id: String(req.params.id) })));
    },
  });
  route(router, '/organizations/:id/members/:user_id', {
    patch: async (req, res) => {
      const ref = { id: String(req.params.id), user_id: String(req.params.user_id) };
      res.json(await callApi(deps, req, res, (core) => core.organizations.members.update({ ...jsonObject(req.body ?? {}), ...ref } as never)));
    },
    // Removes the member (or, on oneself, leaves): their keys of the organization are revoked at once.
    delete: async (req, res) => {
      res.json(await callApi(deps, req, res, (core) => core.organizations.members.remove({ id: String(req.params.id), user_id: String(req.params.user_id) })));
    },
  });
  route(router, '/organizations/:id/invitations', {
    get: async (req, res) => {
      res.json(await callApi(deps, req, res, (core) => core.organizations.invitations.list({ id: String(req.params.id) })));
    },
    // Mails the link to the address; the answer never holds the link's token.
    post: async (req, res) => {
      const invitation = await callApi(deps, req, res, (core) => core.organizations.invitations.create({ ...jsonObject(req.body), id: String(req.params.id) } as never));
      res.status(201).json(invitation);
    },
  });
  route(router, '/organizations/:id/invitations/:invitation_id', {
    delete: async (req, res) => {
      const ref = { id: String(req.params.id), invitation_id: String(req.params.invitation_id) };
      res.json(await callApi(deps, req, res, (core) => core.organizations.invitations.revoke(ref)));
    },
  });
  return router;
}
