import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

/**
 * Every entry point of the built service stops at once, with one line saying what to do, on a
 * Node.js older than the one the project needs (config/require-node.ts is their first import):
 * before it reads its configuration, opens a database or starts anything. The old version is
 * simulated in the pinned Node.js by a preload that rewrites process.versions.node, so the
 * test does not depend on which other Node.js the machine has.
 */
const root = path.resolve(import.meta.dirname, '../..');
const pretend = (version: string) => `data:text/javascript,Object.defineProperty(process.versions,'node',{value:'${version}'})`;

describe('the entry points on an unsupported Node.js', () => {
  for (const entry of ['main', 'api', 'worker', 'migrate', 'mas']) {
    it(`dist/${entry}.js refuses Node.js 20 before doing anything`, () => {
      // An unreachable database: had the entry gone on, it would have tried it and said so.
      const r = spawnSync(process.execPath, ['--import', pretend('20.20.2'), path.join(root, 'dist', `${entry}.js`), 'balance', '--account', 'x'], {
        cwd: root,
        env: { ...process.env, DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none', DATA_DIR: '/nonexistent' },
        encoding: 'utf8',
      });
      expect(r.status).toBe(1);
      expect(r.stdout).toBe('');
      expect(r.stderr.trim().split('\n')).toEqual([expect.stringMatching(/^Model Access Service needs Node\.js 24\.11 or later, and this is Node\.js 20\.20\.2\. Start it through npm/)]);
    });
  }

  it('the same entry goes on where the version is supported (it then fails on the unreachable database, not on the version)', () => {
    const r = spawnSync(process.execPath, ['--import', pretend('24.11.0'), path.join(root, 'dist', 'migrate.js')], {
      cwd: root,
      env: { ...process.env, DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none', LOG_LEVEL: 'fatal' },
      encoding: 'utf8',
      timeout: 120_000,
    });
    expect(r.status).toBe(1);
    expect(r.stderr).not.toContain('needs Node.js');
  });
});
