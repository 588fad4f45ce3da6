import { existsSync, readFileSync } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ensureStripeMock, startStripeMock, STRIPE_MOCK_VERSION, stripeMockCacheDir } from '../../adapters/embedded/stripe-mock.ts';
import { silentLogger } from '../support/db.ts';
import { startTestStripeMock } from '../support/stripe-mock.ts';

const saved = { PATH: process.env.PATH, XDG_CACHE_HOME: process.env.XDG_CACHE_HOME };
afterEach(() => {
  process.env.PATH = saved.PATH;
  if (saved.XDG_CACHE_HOME === undefined) delete process.env.XDG_CACHE_HOME;
  else process.env.XDG_CACHE_HOME = saved.XDG_CACHE_HOME;
});

async function fakeBinary(dir: string, body = 'echo fake'): Promise<string> {
  await fs.mkdir(dir, { recursive: true });
  const file = path.join(dir, 'stripe-mock');
  await fs.writeFile(file, `#!/bin/sh\n${body}\n`, { mode: 0o755 });
  return file;
}

/** A `go` on PATH that runs the given shell lines instead of compiling anything. */
async function fakeGo(root: string, body: string): Promise<void> {
  await fs.mkdir(path.join(root, 'bin'), { recursive: true });
  await fs.writeFile(path.join(root, 'bin', 'go'), `#!/bin/sh\n${body}\n`, { mode: 0o755 });
}

describe('finding stripe-mock', () => {
  it('prefers a stripe-mock on PATH, then the cache outside the clone', async () => {
    const root = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-stripe-mock-'));
    const onPath = await fakeBinary(path.join(root, 'bin'));
    process.env.XDG_CACHE_HOME = path.join(root, 'cache');
    const cached = await fakeBinary(stripeMockCacheDir());
    expect(stripeMockCacheDir()).toBe(path.join(root, 'cache', 'mas', `stripe-mock-v${STRIPE_MOCK_VERSION}`));

    process.env.PATH = `${path.join(root, 'bin')}${path.delimiter}/usr/bin:/bin`;
    expect(await ensureStripeMock(silentLogger)).toBe(onPath);
    process.env.PATH = '/usr/bin:/bin';
    expect(await ensureStripeMock(silentLogger)).toBe(cached);
    await fs.rm(root, { recursive: true, force: true });
  });

  it('builds it once with go install of the pinned version into the cache when several callers start at once', async () => {
    const root = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-stripe-mock-'));
    const runs = path.join(root, 'go-runs');
    await fakeGo(root, `echo "$@" >> ${runs}\nsleep 0.2\nprintf '#!/bin/sh\\necho fake\\n' > "$GOBIN/stripe-mock"\nchmod +x "$GOBIN/stripe-mock"`);
    process.env.XDG_CACHE_HOME = path.join(root, 'cache');
    process.env.PATH = `${path.join(root, 'bin')}${path.delimiter}/usr/bin:/bin`;
    const lines: string[] = [];

    const paths = await Promise.all([1, 2, 3].map(() => ensureStripeMock(silentLogger, { tty: true, out: (line) => lines.push(line) })));
    const cached = path.join(stripeMockCacheDir(), 'stripe-mock');
    expect(paths).toEqual([cached, cached, cached]);
    expect(readFileSync(runs, 'utf8')).toBe(`install github.com/stripe/stripe-mock@v${STRIPE_MOCK_VERSION}\n`);
    expect(lines[0]).toBe(`Building stripe-mock v${STRIPE_MOCK_VERSION} with go install (about a minute): the payment tests use it as the Stripe API; put \`stripe-mock\` on PATH to skip this.`);
    expect(await fs.readdir(stripeMockCacheDir())).toEqual(['stripe-mock']); // no staging folder left
    expect(existsSync(`${stripeMockCacheDir()}.lock`)).toBe(false);
    await fs.rm(root, { recursive: true, force: true });
  });

  it('without Go, fails saying what to do, and downloads nothing', async () => {
    const root = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-stripe-mock-'));
    process.env.XDG_CACHE_HOME = path.join(root, 'cache');
    process.env.PATH = path.join(root, 'empty');
    const failed = ensureStripeMock(silentLogger, { tty: true, out: () => undefined });
    await expect(failed).rejects.toThrow(/Go is not installed.*install Go .* or put `stripe-mock`/);
    expect(existsSync(`${stripeMockCacheDir()}.lock`)).toBe(false);
    await fs.rm(root, { recursive: true, force: true });
  });
});

describe('running stripe-mock', () => {
  it('says what it printed when it stops before listening', async () => {
    const root = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-stripe-mock-'));
    const broken = await fakeBinary(root, 'echo "flag provided but not defined" >&2\nexit 2');
    await expect(startStripeMock(broken)).rejects.toThrow(/exited \(code 2\) before it listened; its output: flag provided but not defined/);
    await fs.rm(root, { recursive: true, force: true });
  });

  it('starts the real one on a port of its own, on the loopback only, and stops it by its PID', async () => {
    const [a, b] = await Promise.all([startTestStripeMock(), startTestStripeMock()]);
    try {
      expect(a.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
      expect(a.url).not.toBe(b.url);
      const res = await fetch(`${a.url}/v1/customers/cus_123`, { headers: { authorization: 'Bearer sk_test_123' } });
      expect(res.status).toBe(200);
      expect(((await res.json()) as { object: string }).object).toBe('customer');
    } finally {
      await Promise.all([a.stop(), b.stop()]);
    }
    const alive = (pid: number) => {
      try {
        process.kill(pid, 0);
        return true;
      } catch {
        return false;
      }
    };
    expect(alive(a.pid)).toBe(false);
    expect(alive(b.pid)).toBe(false);
  });
});
