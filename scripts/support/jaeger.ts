import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import type { Logger } from 'pino';
import { firstUseBuild, masCacheDir, which, type BuildOutput } from '../../adapters/embedded/first-use-build.ts';

const execFileAsync = promisify(execFile);

/**
 * Jaeger's v2 binary (one process: OTLP receiver, in-memory store, query API), for
 * `npm run test:observability` only: the service never needs it. Found or built with no manual
 * step, cached outside the clone like the Temporal CLI (adapters/embedded/temporal-cli.ts):
 *   1. a `jaeger` already on PATH;
 *   2. the cache, ~/.cache/mas/jaeger-v1.76.0/jaeger (XDG_CACHE_HOME respected);
 *   3. with Go: `go install …/cmd/jaeger@v1.76.0` refuses (the module's go.mod has a `replace`
 *      directive), so the module is fetched with `go mod download -json`, copied somewhere
 *      writable, and `go build ./cmd/jaeger` runs inside it (about 3 minutes on 2 cores, a
 *      121 MB binary), at the lowest CPU priority, with progress (first-use-build.ts).
 */
export const JAEGER_VERSION = '1.76.0';
const MODULE = `github.com/jaegertracing/jaeger@v${JAEGER_VERSION}`;

export function jaegerCacheDir(): string {
  return path.join(masCacheDir(), `jaeger-v${JAEGER_VERSION}`);
}

export async function ensureJaeger(logger?: Logger, output: BuildOutput = {}): Promise<string> {
  const onPath = await which('jaeger');
  if (onPath) return onPath;
  const dir = jaegerCacheDir();
  const cached = path.join(dir, 'jaeger');
  const go = await which('go');
  await firstUseBuild({
    ...output,
    ...(logger ? { logger } : {}),
    name: 'Jaeger',
    how: `v${JAEGER_VERSION} built from its Go module (a few minutes)`,
    why: 'npm run test:observability reads the exported traces back through its query API',
    cacheDir: dir,
    isReady: () => existsSync(cached),
    howToFix: go
      ? `run \`go mod download -json ${MODULE}\`, copy the directory it names somewhere writable and run \`CGO_ENABLED=0 go build ./cmd/jaeger\` there by hand to see the whole error, or put a Jaeger v2 binary named \`jaeger\` on PATH (https://www.jaegertracing.io/download/).`
      : `install Go, or put a Jaeger v2 binary named \`jaeger\` on PATH (https://www.jaegertracing.io/download/).`,
    build: async () => {
      if (!go) throw new Error('Go is not installed');
      await build(dir, cached, go);
    },
  });
  return cached;
}

async function build(dir: string, cached: string, go: string): Promise<void> {
  await fs.mkdir(dir, { recursive: true });
  const staging = await fs.mkdtemp(path.join(dir, '.staging-'));
  try {
    const env = { ...process.env, CGO_ENABLED: process.env.CGO_ENABLED ?? '0', GOFLAGS: '-mod=mod' };
    const { stdout } = await execFileAsync(go, ['mod', 'download', '-json', MODULE], { env, maxBuffer: 64 * 1024 * 1024 });
    const source = (JSON.parse(stdout) as { Dir?: string }).Dir;
    if (!source) throw new Error(`go mod download named no directory for ${MODULE}`);
    const tree = path.join(staging, 'src');
    await fs.cp(source, tree, { recursive: true });
    await execChmod(tree);
    // nice: the machine is shared (CI, other builds); the build is minutes either way.
    const nice = await which('nice');
    const [cmd, args] = nice ? [nice, ['-n', '19', go, 'build', '-o', path.join(staging, 'jaeger'), './cmd/jaeger']] : [go, ['build', '-o', path.join(staging, 'jaeger'), './cmd/jaeger']];
    await execFileAsync(cmd, args as string[], { cwd: tree, env, maxBuffer: 64 * 1024 * 1024 });
    await fs.rename(path.join(staging, 'jaeger'), cached);
  } finally {
    await fs.rm(staging, { recursive: true, force: true }).catch(() => {});
  }
}

/** The module cache is read-only; the copy must be writable for go build (and for rm). */
async function execChmod(tree: string): Promise<void> {
  await execFileAsync('chmod', ['-R', 'u+w', tree]);
}
