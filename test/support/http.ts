import type { Server } from 'node:http';
import type { MikroORM } from '@mikro-orm/postgresql';
import { createRestApp } from '../../adapters/rest/app.ts';
import { silentLogger, testDeps } from './db.ts';

/** The real REST app on a real port of this machine, wired to the test database. */
export async function startTestApi(orm: MikroORM, opts: Parameters<typeof testDeps>[1] = {}): Promise<{ url: string; close: () => Promise<void> }> {
  const app = createRestApp({ deps: testDeps(orm, opts), logger: silentLogger, publicBaseUrl: 'http://localhost' });
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
