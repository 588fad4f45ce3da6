import express, { Router } from 'express';
import type { Logger } from 'pino';
import type { CoreDeps } from '../../core/context.ts';
import type { HttpAdapter } from '../http/app.ts';
import { sendUnknownRoute } from '../http/error-body.ts';
import { errorHandler } from './errors.ts';
import { chatRoutes } from './routes/chat.ts';
import { creditRoutes } from './routes/credits.ts';
import { docsRoutes } from './routes/docs.ts';
import { fileRoutes } from './routes/files.ts';
import { generationRoutes } from './routes/generations.ts';
import { keyRoutes } from './routes/key.ts';
import { managedKeyRoutes } from './routes/keys.ts';
import { modelRoutes } from './routes/models.ts';
import { organizationRoutes } from './routes/organizations.ts';
import { JSON_TYPES } from './routes/route.ts';
import { walletRoutes } from './routes/wallet.ts';

export interface RestOptions {
  publicBaseUrl: string;
  logger: Logger;
  /** Where uploads are spooled while they arrive; the system's temporary folder by default. */
  uploadSpoolDir?: string | undefined;
}

/** JSON bodies above this size get 413; file uploads come through multipart, not this parser. */
export const JSON_BODY_LIMIT = '4mb';

/** The REST API at /api/v1: its routes, its JSON body parser, and its one error table (errors.ts). */
export function restAdapter(deps: CoreDeps, opts: RestOptions): HttpAdapter {
  const router = Router();
  router.use(express.json({ limit: JSON_BODY_LIMIT, strict: true, type: JSON_TYPES }));
  // Chat first: express tries routers in order, and chat is the route called most (no two
  // routers share a path, so the order changes nothing else).
  router.use(
    chatRoutes(deps, opts.logger),
    generationRoutes(deps),
    fileRoutes(deps, { spoolDir: opts.uploadSpoolDir }),
    walletRoutes(deps),
    keyRoutes(deps),
    // The provisioning API (docs/organizations.md): management keys only.
    managedKeyRoutes(deps),
    organizationRoutes(deps),
    creditRoutes(deps),
    modelRoutes(deps),
    docsRoutes(deps, opts.publicBaseUrl, { topUpMinCents: deps.config.payments.topUpMinCents, topUpMaxCents: deps.config.payments.topUpMaxCents, plans: deps.config.payments.plans.map((p) => p.name) }),
  );
  router.use((req, res) => sendUnknownRoute(req, res, opts.publicBaseUrl));
  router.use(errorHandler(opts.logger));
  return { path: '/api/v1', router };
}
