import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import type { Logger } from 'pino';

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
 */
export const TEMPORAL_CLI_VERSION = '1.5.1';

export function temporalCacheDir(): string {
  const base = process.env.XDG_CACHE_HOME || path.join(os.homedir(), '.cache');
  return path.join(base, 'mas', `temporal-cli-v${TEMPORAL_CLI_VERSION}`);
}

export async function ensureTemporalCli(logger: Logger): Promise<string> {
  const onPath = await which('temporal');
  if (onPath) return onPath;

  const dir = temporalCacheDir();
  const cached = path.join(dir, 'temporal');
  if (existsSync(cached)) return cached;

  await fs.mkdir(dir, { recursive: true });
  // Build into a private folder, then move into place: a concurrent install never sees half a binary.
  const staging = await fs.mkdtemp(path.join(dir, '.staging-'));
  try {
    const go = await which('go');
    if (go) {
      logger.warn({ dir }, `installing the Temporal CLI v${TEMPORAL_CLI_VERSION} with "go install" (first time only; this takes a few minutes)`);
      await execFileAsync(go, ['install', `github.com/temporalio/cli/cmd/temporal@v${TEMPORAL_CLI_VERSION}`], {
        env: { ...process.env, GOBIN: staging, CGO_ENABLED: process.env.CGO_ENABLED ?? '0' },
        maxBuffer: 64 * 1024 * 1024,
      });
    } else {
      await downloadRelease(staging, logger);
    }
    await fs.rename(path.join(staging, 'temporal'), cached);
    logger.warn({ path: cached }, 'installed the Temporal CLI');
    return cached;
  } catch (err) {
    if (existsSync(cached)) return cached; // another process finished first
    throw new Error(`could not install the Temporal CLI: ${(err as Error).message}. Install it (https://docs.temporal.io/cli) or set TEMPORAL_ADDRESS.`);
  } finally {
    await fs.rm(staging, { recursive: true, force: true });
  }
}

async function downloadRelease(into: string, logger: Logger): Promise<void> {
  const osName = process.platform === 'darwin' ? 'darwin' : 'linux';
  const arch = process.arch === 'arm64' ? 'arm64' : 'amd64';
  const url = `https://temporal.download/cli/archive/v${TEMPORAL_CLI_VERSION}?platform=${osName}&arch=${arch}`;
  logger.warn({ url }, 'downloading the Temporal CLI release archive');
  const res = await fetch(url);
  if (!res.ok) throw new Error(`download failed with HTTP ${res.status}`);
  const archive = path.join(into, 'temporal.tar.gz');
  await fs.writeFile(archive, Buffer.from(await res.arrayBuffer()));
  await execFileAsync('tar', ['-xzf', archive, '-C', into, 'temporal']);
}

async function which(command: string): Promise<string | undefined> {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    if (!dir) continue;
    const candidate = path.join(dir, command);
    try {
      await fs.access(candidate, fs.constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return undefined;
}
