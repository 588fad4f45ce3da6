import express, { type Express } from 'express';
import type { Logger } from 'pino';
import type { CoreDeps } from '../../core/context.ts';
import { errorHandler, sendHttpError } from './errors.ts';
import { requestLogger } from './logging.ts';
import { createHttpMetrics, type HttpMetrics } from './metrics.ts';
import { operationsRoutes } from './routes/operations.ts';
import { chatRoutes } from './routes/chat.ts';
import { docsRoutes } from './routes/docs.ts';
import { fileRoutes } from './routes/files.ts';
import { generationRoutes } from './routes/generations.ts';
import { modelRoutes } from './routes/models.ts';
import { walletRoutes } from './routes/wallet.ts';

export interface RestOptions {
  deps: CoreDeps;
  logger: Logger;
  publicBaseUrl: string;
  metrics?: HttpMetrics;
  metricsToken?: string | undefined;
  trustProxy?: boolean;
  /** True once shutdown has begun: /readyz answers 503 so load balancers move away. */
  isDraining?: () => boolean;
  /** Where uploads are spooled while they arrive; the system's temporary folder by default. */
  uploadSpoolDir?: string;
}

/** JSON bodies above this size get 413; file uploads come through multipart, not this parser. */
export const JSON_BODY_LIMIT = '4mb';

export function createRestApp(opts: RestOptions): Express {
  const { deps, logger } = opts;
  const metrics = opts.metrics ?? createHttpMetrics();
  const app = express();
  app.disable('x-powered-by');
  // No ETag: it hashes every JSON body, and API answers (balances, completions) are not cached.
  app.set('etag', false);
  app.set('trust proxy', opts.trustProxy ?? false);
  app.set('json replacer', undefined);

  app.use(requestLogger(logger));
  app.use(metrics.middleware);
  app.use(express.json({ limit: JSON_BODY_LIMIT, strict: true, type: ['application/json', 'application/*+json'] }));

  // Chat first: express tries routers in order, and chat is the route called most (no two
  // routers share a path, so the order changes nothing else).
  app.use('/api/v1', chatRoutes(deps, logger), generationRoutes(deps), fileRoutes(deps, { spoolDir: opts.uploadSpoolDir }), walletRoutes(deps), modelRoutes(deps), docsRoutes(opts.publicBaseUrl));
  app.use(operationsRoutes(deps, { metrics, metricsToken: opts.metricsToken, isDraining: opts.isDraining ?? (() => false) }));

  app.use((_req, res) => sendHttpError(res, 'unknown_route'));
  app.use(errorHandler(logger));
  return app;
}
