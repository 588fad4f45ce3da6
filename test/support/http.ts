import type { Server } from 'node:http';
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Express } from 'express';
import type { Logger } from 'pino';
import { createHttpApp } from '../../adapters/http/app.ts';
import { createLimiters } from '../../adapters/limits/rate-limiter.ts';
import { mcpAdapter } from '../../adapters/mcp/mcp.ts';
import { oauthAdapter } from '../../adapters/mcp/oauth.ts';
import { restAdapter } from '../../adapters/rest/rest.ts';
import { browserKit } from '../../adapters/http/browser.ts';
import { webAdapter } from '../../adapters/web/web.ts';
import { webhooksAdapter } from '../../adapters/webhooks/webhooks.ts';
import { adminPagesAdapter } from '../../adapters/web/admin/admin.ts';
import { graphqlAdapter } from '../../adapters/graphql/graphql.ts';
import type { CoreDeps } from '../../core/context.ts';
import { silentLogger, testDeps } from './db.ts';

/** The HTTP app as the server composes it (config/service.ts), with the MCP and REST adapters mounted. */
export function createTestApp(opts: { deps: CoreDeps; logger?: Logger; publicBaseUrl?: string; uploadSpoolDir?: string; mcpGenerateWaitSeconds?: number; mcpGenerateQuietWaitSeconds?: number; mcpProgressEverySeconds?: number }): Express {
  const logger = opts.logger ?? silentLogger;
  const kit = browserKit({ publicBaseUrl: opts.publicBaseUrl ?? 'http://localhost', secret: 'test-csrf-secret' });
  return createHttpApp({
    deps: opts.deps,
    logger,
    publicBaseUrl: opts.publicBaseUrl ?? 'http://localhost',
    adapters: [
      mcpAdapter(opts.deps, { publicBaseUrl: opts.publicBaseUrl ?? 'http://localhost', logger, version: '0.0.0-test', generateWaitSeconds: opts.mcpGenerateWaitSeconds ?? 100, generateQuietWaitSeconds: opts.mcpGenerateQuietWaitSeconds, progressEverySeconds: opts.mcpProgressEverySeconds }),
      restAdapter(opts.deps, { publicBaseUrl: opts.publicBaseUrl ?? 'http://localhost', logger, uploadSpoolDir: opts.uploadSpoolDir }),
      webhooksAdapter(opts.deps, { logger }),
      oauthAdapter(opts.deps, { publicBaseUrl: opts.publicBaseUrl ?? 'http://localhost', windowLimiter: (w) => createLimiters({}).window(w) }),
      graphqlAdapter(opts.deps, { logger, uiUrl: 'http://temporal-ui.test', namespace: 'default' }),
      adminPagesAdapter(opts.deps, { kit, logger, temporal: { uiUrl: 'http://temporal-ui.test', namespace: 'default' } }),
      webAdapter(opts.deps, { kit, logger }),
    ],
  });
}

/** The real REST app on a real port of this machine, wired to the test database. */
export async function startTestApi(orm: MikroORM, opts: Parameters<typeof testDeps>[1] = {}): Promise<{ url: string; close: () => Promise<void> }> {
  const app = createTestApp({ deps: testDeps(orm, opts) });
  const server = await new Promise<Server>((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export async function getJson(url: string, init: RequestInit = {}) {
  const res = await fetch(url, init);
  const text = await res.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = text;
  }
  return { status: res.status, headers: res.headers, body: body as any };
}

export const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

/** Serves an app on a free port of this machine; `close` ends its connections too. */
export async function serve(app: Express): Promise<{ base: string; close: () => Promise<void> }> {
  const server = await new Promise<Server>((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  return {
    base: `http://127.0.0.1:${(server.address() as { port: number }).port}`,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
