import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { firstUseBuild, masCacheDir } from '../../adapters/embedded/first-use-build.ts';
import { type RunResult, runCollected } from './process.ts';

/**
 * The MCP Inspector CLI, as agent developers run it (`npx @modelcontextprotocol/inspector --cli`),
 * for the tests that hold the server to its `--strict` schema lint. Not a project dependency (it
 * brings a web UI, a TUI and their packages): installed on first use, pinned, from npm into
 * ~/.cache/mas/inspector-<version> (XDG_CACHE_HOME respected), one install per machine at a time,
 * with progress (adapters/embedded/first-use-build.ts), and reused after. It needs Node >= 22.19:
 * it runs on this process's Node (the pinned Node 24 under `npm exec` / `npx vitest`).
 */
export const INSPECTOR_VERSION = '2.12.0';

export function inspectorDir(): string {
  return path.join(masCacheDir(), `inspector-${INSPECTOR_VERSION}`);
}

/** Installs the Inspector if it is not complete yet; returns the path of its launcher script. */
export async function ensureInspector(): Promise<string> {
  const dir = inspectorDir();
  const marker = path.join(dir, '.mas-complete');
  const launcher = path.join(dir, 'node_modules', '@modelcontextprotocol', 'inspector', 'clients', 'launcher', 'build', 'index.js');
  const install = ['install', '--prefix', dir, '--no-audit', '--no-fund', '--no-save', `@modelcontextprotocol/inspector@${INSPECTOR_VERSION}`];
  await firstUseBuild({
    name: `the MCP Inspector ${INSPECTOR_VERSION}`,
    how: 'with npm install',
    why: 'test/e2e/mcp-inspector.test.ts runs its CLI with --strict against the MCP server',
    cacheDir: dir,
    isReady: () => existsSync(marker) && existsSync(launcher),
    howToFix: `run \`npm ${install.join(' ')}\` by hand to see the whole error.`,
    async build() {
      await fs.mkdir(dir, { recursive: true });
      await run('npm', install);
      await fs.writeFile(marker, `${INSPECTOR_VERSION}\n`);
    },
  });
  return launcher;
}

/** Runs the Inspector CLI with these arguments; resolves with its exit code and output, whatever the code. */
export async function runInspectorCli(args: string[], env: Record<string, string> = {}): Promise<RunResult> {
  const launcher = await ensureInspector();
  return runCollected(process.execPath, [launcher, '--cli', ...args], { env: { ...process.env, ...env } });
}

/** npm on the PATH of this process, which puts the pinned Node first under `npm exec`. */
function run(cmd: string, args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'inherit', 'inherit'] });
    child.once('error', (err) => reject(new Error(`${cmd} ${args.join(' ')} failed (${err.message})`)));
    child.once('close', (code) => (code === 0 ? resolve() : reject(new Error(`${cmd} ${args.join(' ')} exited with ${code}`))));
  });
}
