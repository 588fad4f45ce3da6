import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import type { Logger } from 'pino';
import { firstUseBuild, masCacheDir, which, type BuildOutput } from './first-use-build.ts';

const execFileAsync = promisify(execFile);

/**
 * The Temporal CLI (`temporal server start-dev`) for the embedded dev server and the tests,
 * found or installed with no manual step, and cached outside the clone so every clone on
 * this machine (and CI) reuses it:
 *   1. a `temporal` already on PATH;
 *   2. the cache, ~/.cache/mas/temporal-cli-v1.5.1/temporal (XDG_CACHE_HOME respected);
 *   3. where Go is installed: `go install github.com/temporalio/cli/cmd/temporal@v1.5.1`
 *      into the cache (later tags carry a `replace` directive that go install rejects);
 *      minutes of compiling the first time;
 *   4. else the official release archive, on a machine with internet.
 * Steps 3 and 4 run one process at a time per machine, with progress (first-use-build.ts).
 */
export const TEMPORAL_CLI_VERSION = '1.5.1';
const MODULE = `github.com/temporalio/cli/cmd/temporal@v${TEMPORAL_CLI_VERSION}`;

export function temporalCacheDir(): string {
  return path.join(masCacheDir(), `temporal-cli-v${TEMPORAL_CLI_VERSION}`);
}

/** The CLI's path; builds it on first use, one process at a time per machine (first-use-build.ts). */
export async function ensureTemporalCli(logger: Logger, output: BuildOutput = {}): Promise<string> {
  const onPath = await which('temporal');
  if (onPath) return onPath;

  const dir = temporalCacheDir();
  const cached = path.join(dir, 'temporal');
  const go = await which('go');
  const alternatives = 'or install `temporal` on PATH (https://docs.temporal.io/cli), or set TEMPORAL_ADDRESS to use a Temporal cluster instead of the embedded dev server';
  await firstUseBuild({
    ...output,
    logger,
    name: 'the Temporal CLI',
    how: go ? `v${TEMPORAL_CLI_VERSION} with go install (a few minutes)` : `v${TEMPORAL_CLI_VERSION} from its release archive (Go is not installed)`,
    why: 'the embedded Temporal dev server needs it; set TEMPORAL_ADDRESS to use a cluster instead',
    cacheDir: dir,
    isReady: () => existsSync(cached),
    howToFix: go
      ? `run \`GOBIN=${dir} CGO_ENABLED=0 go install ${MODULE}\` by hand to see the whole error, ${alternatives}.`
      : `download ${releaseUrl()} and put its \`temporal\` in ${dir}, or install Go and start again, ${alternatives}.`,
    build: () => install(dir, cached, go),
  });
  return cached;
}

async function install(dir: string, cached: string, go: string | undefined): Promise<void> {
  await fs.mkdir(dir, { recursive: true });
  // Build into a private folder, then move into place: nothing ever sees half a binary, even
  // if this process is killed mid-build and the lock is taken over.
  const staging = await fs.mkdtemp(path.join(dir, '.staging-'));
  try {
    if (go) {
      await execFileAsync(go, ['install', MODULE], {
        env: { ...process.env, GOBIN: staging, CGO_ENABLED: process.env.CGO_ENABLED ?? '0' },
        maxBuffer: 64 * 1024 * 1024,
      });
    } else {
      await downloadRelease(staging);
    }
    await fs.rename(path.join(staging, 'temporal'), cached);
  } finally {
    await fs.rm(staging, { recursive: true, force: true });
  }
}

function releaseUrl(): string {
  const osName = process.platform === 'darwin' ? 'darwin' : 'linux';
  const arch = process.arch === 'arm64' ? 'arm64' : 'amd64';
  return `https://temporal.download/cli/archive/v${TEMPORAL_CLI_VERSION}?platform=${osName}&arch=${arch}`;
}

async function downloadRelease(into: string): Promise<void> {
  const url = releaseUrl();
  const res = await fetch(url);
  if (!res.ok) throw new Error(`download of ${url} failed with HTTP ${res.status}`);
  const archive = path.join(into, 'temporal.tar.gz');
  await fs.writeFile(archive, Buffer.from(await res.arrayBuffer()));
  await execFileAsync('tar', ['-xzf', archive, '-C', into, 'temporal']);
}
