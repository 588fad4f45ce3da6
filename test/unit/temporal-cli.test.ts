import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ensureTemporalCli, temporalCacheDir, TEMPORAL_CLI_VERSION } from '../../adapters/embedded/temporal-cli.ts';
import { silentLogger } from '../support/db.ts';

const saved = { PATH: process.env.PATH, XDG_CACHE_HOME: process.env.XDG_CACHE_HOME };
afterEach(() => {
  process.env.PATH = saved.PATH;
  if (saved.XDG_CACHE_HOME === undefined) delete process.env.XDG_CACHE_HOME;
  else process.env.XDG_CACHE_HOME = saved.XDG_CACHE_HOME;
});

async function fakeBinary(dir: string): Promise<string> {
  await fs.mkdir(dir, { recursive: true });
  const file = path.join(dir, 'temporal');
  await fs.writeFile(file, '#!/bin/sh\necho fake\n', { mode: 0o755 });
  return file;
}

describe('finding the Temporal CLI', () => {
  it('prefers a temporal on PATH, then the cache outside the clone', async () => {
    const root = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-cli-'));
    const onPath = await fakeBinary(path.join(root, 'bin'));
    process.env.XDG_CACHE_HOME = path.join(root, 'cache');
    const cached = await fakeBinary(temporalCacheDir());
    expect(temporalCacheDir()).toBe(path.join(root, 'cache', 'mas', `temporal-cli-v${TEMPORAL_CLI_VERSION}`));

    process.env.PATH = `${path.join(root, 'bin')}${path.delimiter}/usr/bin:/bin`;
    expect(await ensureTemporalCli(silentLogger)).toBe(onPath);
    process.env.PATH = '/usr/bin:/bin';
    expect(await ensureTemporalCli(silentLogger)).toBe(cached);
    await fs.rm(root, { recursive: true, force: true });
  });
});
