import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { existsSync, readFileSync } from 'node:fs';
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

  it('builds it once with go install into the cache when several callers start at once, saying what and why', async () => {
    const root = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-cli-'));
    const runs = path.join(root, 'go-runs');
    await fakeGo(root, `echo "$@" >> ${runs}\nsleep 0.2\nprintf '#!/bin/sh\\necho fake\\n' > "$GOBIN/temporal"\nchmod +x "$GOBIN/temporal"`);
    process.env.XDG_CACHE_HOME = path.join(root, 'cache');
    process.env.PATH = `${path.join(root, 'bin')}${path.delimiter}/usr/bin:/bin`;
    const lines: string[] = [];
    const output = { tty: true, out: (line: string) => lines.push(line) };

    const paths = await Promise.all([1, 2, 3].map(() => ensureTemporalCli(silentLogger, output)));
    const cached = path.join(temporalCacheDir(), 'temporal');
    expect(paths).toEqual([cached, cached, cached]);
    expect(readFileSync(runs, 'utf8')).toBe(`install github.com/temporalio/cli/cmd/temporal@v${TEMPORAL_CLI_VERSION}\n`);
    expect(lines[0]).toBe(`Building the Temporal CLI v${TEMPORAL_CLI_VERSION} with go install (a few minutes): the embedded Temporal dev server needs it; set TEMPORAL_ADDRESS to use a cluster instead.`);
    expect(lines).toContain(`This happens once per machine; the result is kept in ${temporalCacheDir()}.`);
    expect(lines.at(-1)).toMatch(/^Built the Temporal CLI: done in \d+ s\.$/);
    expect(await fs.readdir(temporalCacheDir())).toEqual(['temporal']); // no staging folder left
    expect(existsSync(`${temporalCacheDir()}.lock`)).toBe(false);
    await fs.rm(root, { recursive: true, force: true });
  });

  it('when go install fails, says what to do and leaves neither a staging folder nor the lock', async () => {
    const root = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-cli-'));
    await fakeGo(root, 'echo "go: proxy.golang.org: network is unreachable" >&2\nexit 1');
    process.env.XDG_CACHE_HOME = path.join(root, 'cache');
    process.env.PATH = `${path.join(root, 'bin')}${path.delimiter}/usr/bin:/bin`;
    const lines: string[] = [];

    const failed = ensureTemporalCli(silentLogger, { tty: true, out: (line) => lines.push(line) });
    await expect(failed).rejects.toThrow(/network is unreachable/);
    await expect(failed).rejects.toThrow(/what to do: run `GOBIN=\S+ CGO_ENABLED=0 go install github\.com\/temporalio\/cli\/cmd\/temporal@v1\.5\.1` by hand/);
    const advice = lines.find((l) => l.startsWith('What to do: '));
    expect(advice).toContain('install `temporal` on PATH');
    expect(advice).toContain('set TEMPORAL_ADDRESS');
    expect(await fs.readdir(temporalCacheDir())).toEqual([]);
    expect(existsSync(`${temporalCacheDir()}.lock`)).toBe(false);
    await fs.rm(root, { recursive: true, force: true });
  });
});

/** A `go` on PATH that runs the given shell lines instead of compiling anything. */
async function fakeGo(root: string, body: string): Promise<void> {
  await fs.mkdir(path.join(root, 'bin'), { recursive: true });
  await fs.writeFile(path.join(root, 'bin', 'go'), `#!/bin/sh\n${body}\n`, { mode: 0o755 });
}
