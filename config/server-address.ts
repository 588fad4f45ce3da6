import { readFileSync } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';

/**
 * The address a running server serves at, recorded in DATA_DIR/server.json when it starts
 * listening, so that the CLI run beside it without the server's PORT or PUBLIC_BASE_URL (a second
 * shell, `npm run mas -- admin create`) prints links to where the server really is, not to
 * http://localhost:8080 (issue 34). The CLI's own PUBLIC_BASE_URL or PORT, when given, win.
 */
const FILE = 'server.json';

export async function recordServerAddress(dataDir: string, publicBaseUrl: string): Promise<void> {
  await fs.mkdir(dataDir, { recursive: true });
  // Written beside, then renamed: a CLI reading at that moment sees the old file or the new one.
  const staging = path.join(dataDir, `.${FILE}.${process.pid}`);
  await fs.writeFile(staging, `${JSON.stringify({ public_base_url: publicBaseUrl, pid: process.pid, started_at: new Date().toISOString() })}\n`);
  await fs.rename(staging, path.join(dataDir, FILE));
}

/** The recorded address, or undefined when no server has started with this DATA_DIR (or the file is not ours). */
export function recordedServerAddress(dataDir: string): string | undefined {
  try {
    const value = (JSON.parse(readFileSync(path.join(dataDir, FILE), 'utf8')) as { public_base_url?: unknown }).public_base_url;
    return typeof value === 'string' && /^https?:\/\/[^\s]+$/.test(value) ? value : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The base URL for the CLI's links: the environment's when it names one (PUBLIC_BASE_URL, or
 * PORT for http://localhost:$PORT), else the running server's recorded one, else the default.
 */
export function cliPublicBaseUrl(source: NodeJS.ProcessEnv, resolved: { PUBLIC_BASE_URL: string; DATA_DIR: string }): string {
  if (source.PUBLIC_BASE_URL || source.PORT) return resolved.PUBLIC_BASE_URL;
  return recordedServerAddress(resolved.DATA_DIR) ?? resolved.PUBLIC_BASE_URL;
}
