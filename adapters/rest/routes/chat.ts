import { Router } from 'express';
import type { Logger } from 'pino';
import type { CoreDeps } from '../../../core/context.ts';
import { callApi } from '../caller.ts';
import { sendEventStream, sendResponseEventStream } from '../sse.ts';
import { route } from './route.ts';

export function chatRoutes(deps: CoreDeps, logger: Logger): Router {
  const router = Router();
  route(router, '/chat/completions', {
    post: async (req, res) => {
      const result = await callApi(deps, req, res, (core) => core.chat.complete(req.body));
      if (result.stream) await sendEventStream(res, result.chunks, () => req.log ?? logger);
      else res.json(result.completion);
    },
  });
  route(router, '/chat/completions/:id', {
    get: async (req, res) => {
      res.json(await callApi(deps, req, res, (core) => core.chat.get({ id: String(req.params.id) })));
    },
  });
  route(router, '/responses', {
    post: async (req, res) => {
      const result = await callApi(deps, req, res, (core) => core.chat.respond(req.body));
      if (result.stream) await sendResponseEventStream(res, result.events, () => req.log ?? logger);
      else res.json(result.response);
    },
  });
  route(router, '/responses/:id', {
    get: async (req, res) => {
      res.json(await callApi(deps, req, res, (core) => core.chat.getResponse({ id: String(req.params.id) })));
    },
  });
  return router;
}
