import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import type { Logger } from 'pino';
import { firstUseBuild, masCacheDir, which, type BuildOutput } from '../../adapters/embedded/first-use-build.ts';

const execFileAsync = promisify(execFile);

/**
 * The servers the tests, `npm run cluster` and `npm run test:scale` run beside the service that
 * npm does not bring: Redis, nginx, Prometheus and Chromium, all Debian's packages. Found or
 * fetched with no manual step, as the Temporal CLI is (adapters/embedded/first-use-build.ts):
 *
 *   1. the variable that names the binary (REDIS_SERVER_BIN, NGINX_BIN, PROMETHEUS_BIN, CHROMIUM_PATH);
 *   2. the system's own (on PATH, or where Debian installs it);
 *   3. the cache, ~/.cache/mas/debian-bookworm/ (XDG_CACHE_HOME respected): Redis, nginx and
 *      Prometheus are `apt-get download`ed with the libraries a bare Debian lacks and unpacked
 *      there with `dpkg -x` (no service is installed or started, nothing outside the cache is
 *      touched); each binary gets a small wrapper that sets LD_LIBRARY_PATH and execs it;
 *   4. Chromium, whose libraries are too many to unpack beside it, is installed with
 *      `apt-get install chromium` when this runs as root (as on CI), else the error says how.
 *
 * One process at a time per machine (a lock beside the cache), with progress lines.
 */
export type SystemTool = 'redis-server' | 'nginx' | 'prometheus' | 'chromium';

interface Unpacked {
  /** Debian packages to unpack together. */
  packages: string[];
  /** Where the binary lies inside the unpacked tree. */
  binary: string;
  env: string;
  system: string[];
}

const UNPACKED: Record<Exclude<SystemTool, 'chromium'>, Unpacked> = {
  'redis-server': { packages: ['redis-server', 'redis-tools', 'libjemalloc2', 'liblzf1'], binary: 'usr/bin/redis-server', env: 'REDIS_SERVER_BIN', system: ['/usr/bin/redis-server'] },
  nginx: { packages: ['nginx', 'nginx-common'], binary: 'usr/sbin/nginx', env: 'NGINX_BIN', system: ['/usr/sbin/nginx'] },
  prometheus: { packages: ['prometheus'], binary: 'usr/bin/prometheus', env: 'PROMETHEUS_BIN', system: ['/usr/bin/prometheus'] },
};

export const CHROMIUM_SYSTEM = '/usr/bin/chromium';

/** ~/.cache/mas/debian-bookworm: one folder per tool, each a `dpkg -x` tree and a `bin/` of wrappers. */
export const debianCacheDir = () => path.join(masCacheDir(), 'debian-bookworm');

const inProcess = new Map<SystemTool, Promise<string>>();

/** The path of a runnable `tool`: found, or fetched once per machine. */
export function ensureSystemTool(tool: SystemTool, opts: { logger?: Logger } & BuildOutput = {}): Promise<string> {
  let found = inProcess.get(tool);
  if (!found) {
    found = (tool === 'chromium' ? ensureChromium(opts) : ensureUnpacked(tool, opts)).catch((err: unknown) => {
      inProcess.delete(tool);
      throw err;
    });
    inProcess.set(tool, found);
  }
  return found;
}

/** The path a tool is found at without fetching anything, or undefined. */
export async function findSystemTool(tool: SystemTool): Promise<string | undefined> {
  if (tool === 'chromium') {
    const named = process.env.CHROMIUM_PATH;
    if (named) return named;
    return existsSync(CHROMIUM_SYSTEM) ? CHROMIUM_SYSTEM : undefined;
  }
  const spec = UNPACKED[tool];
  const named = process.env[spec.env];
  if (named) return named;
  const onPath = await which(tool);
  if (onPath) return onPath;
  for (const p of spec.system) if (existsSync(p)) return p;
  const cached = wrapperPath(tool);
  return existsSync(cached) ? cached : undefined;
}

const wrapperPath = (tool: string) => path.join(debianCacheDir(), tool, 'bin', tool);

async function ensureUnpacked(tool: Exclude<SystemTool, 'chromium'>, opts: { logger?: Logger } & BuildOutput): Promise<string> {
  const found = await findSystemTool(tool);
  if (found) return found;
  const spec = UNPACKED[tool];
  const dir = path.join(debianCacheDir(), tool);
  const wrapper = wrapperPath(tool);
  await firstUseBuild({
    ...opts,
    name: `Debian's ${tool}`,
    how: `(${spec.packages.join(', ')}) with apt-get download and dpkg -x`,
    why: `the tests run a real ${tool}; install it (apt-get install ${spec.packages[0]}) or set ${spec.env} to skip this`,
    cacheDir: dir,
    isReady: () => existsSync(wrapper),
    howToFix: `run \`apt-get update && apt-get install ${spec.packages[0]}\` as root, or set ${spec.env} to a ${tool} binary.`,
    build: async () => {
      await fs.mkdir(path.dirname(dir), { recursive: true });
      const staging = await fs.mkdtemp(path.join(path.dirname(dir), `.staging-${tool}-`));
      try {
        const debs = path.join(staging, 'debs');
        await fs.mkdir(debs);
        await aptDownload(spec.packages, debs);
        const tree = path.join(staging, 'root');
        for (const deb of await fs.readdir(debs)) await execFileAsync('dpkg', ['-x', path.join(debs, deb), tree]);
        await fs.rm(debs, { recursive: true });
        const bin = path.join(staging, 'bin');
        await fs.mkdir(bin);
        // The libraries the packages brought (libjemalloc, liblzf for Redis) come first; the
        // binary keeps its own name (its comm), which process listings match on.
        const libs = ['usr/lib/x86_64-linux-gnu', 'usr/lib/aarch64-linux-gnu', 'usr/lib', 'lib/x86_64-linux-gnu'].map((l) => path.join(dir, 'root', l)).join(':');
        await fs.writeFile(
          path.join(bin, tool),
          `#!/bin/sh\n# Debian's ${tool}, unpacked by scripts/support/system-tools.ts\nLD_LIBRARY_PATH="${libs}\${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "${path.join(dir, 'root', spec.binary)}" "$@"\n`,
          { mode: 0o755 },
        );
        await fs.rm(dir, { recursive: true, force: true });
        await fs.rename(staging, dir);
      } finally {
        await fs.rm(staging, { recursive: true, force: true });
      }
      // The unpacked binary must run here: a missing library shows now, not in a test.
      await execFileAsync(wrapper, [tool === 'nginx' ? '-v' : '--version']);
    },
  });
  return wrapper;
}

/** `apt-get download` into `dir`; as root, refreshes the package lists once when they are missing or stale. */
async function aptDownload(packages: string[], dir: string): Promise<void> {
  if (!(await which('apt-get'))) throw new Error('apt-get is not here (this fetch needs Debian or Ubuntu)');
  const download = () => execFileAsync('apt-get', ['download', '-q', ...packages], { cwd: dir, maxBuffer: 16 * 1024 * 1024 });
  try {
    await download();
  } catch (err) {
    if (process.getuid?.() !== 0) throw err;
    await execFileAsync('apt-get', ['update', '-qq'], { maxBuffer: 16 * 1024 * 1024 });
    await download();
  }
}

async function ensureChromium(opts: { logger?: Logger } & BuildOutput): Promise<string> {
  const found = await findSystemTool('chromium');
  if (found) return found;
  await firstUseBuild({
    ...opts,
    name: "Debian's chromium",
    how: 'with apt-get install (a few minutes)',
    why: 'the browser tests drive a real Chromium through playwright-core, which downloads nothing; set CHROMIUM_PATH to skip this',
    cacheDir: path.join(debianCacheDir(), 'chromium'),
    isReady: () => existsSync(CHROMIUM_SYSTEM),
    howToFix: 'run `apt-get update && apt-get install chromium` as root, or set CHROMIUM_PATH to a Chromium or Chrome binary.',
    build: async () => {
      if (process.getuid?.() !== 0) throw new Error('Chromium is installed with apt-get, which needs root');
      if (!(await which('apt-get'))) throw new Error('apt-get is not here (this fetch needs Debian or Ubuntu)');
      const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
      const install = () => execFileAsync('apt-get', ['install', '-y', '-qq', '--no-install-recommends', 'chromium'], { env, maxBuffer: 64 * 1024 * 1024 });
      try {
        await install();
      } catch {
        await execFileAsync('apt-get', ['update', '-qq'], { env, maxBuffer: 16 * 1024 * 1024 });
        await install();
      }
    },
  });
  return CHROMIUM_SYSTEM;
}
