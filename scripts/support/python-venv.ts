import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from 'pino';
import { firstUseBuild, masCacheDir, type BuildOutput } from '../../adapters/embedded/first-use-build.ts';

/**
 * Python tools the scripts and benchmarks use (schemathesis, LiteLLM) live in venvs outside the
 * clone, under ~/.cache/mas/<name>-<version> (XDG_CACHE_HOME respected), made on first use from
 * PyPI with pinned requirements, one process at a time per machine, with progress
 * (adapters/embedded/first-use-build.ts; the lock is <venv>.lock).
 *
 * A venv cannot be moved (its scripts name their interpreter by absolute path), so it is built in
 * place and marked complete only once every pip step has succeeded; an unmarked one (an
 * interrupted install) is built again. The version is in the folder's name, so a new pin makes a
 * new venv.
 */
export interface PythonVenvOptions extends BuildOutput {
  /** The venv's folder; ~/.cache/mas/<name>-<version> by default. */
  dir?: string;
  name: string;
  version: string;
  /** Who needs it, for the progress lines: "the schemathesis run (npm run test:schema) needs it". */
  why: string;
  /** pip requirement lists, installed one after the other (`pip install <list…>`). */
  installs: string[][];
  /** A further test of a complete venv (e.g. that its program runs); false builds it again. */
  works?: (venv: string) => boolean | Promise<boolean>;
  /** Off a terminal, progress goes here as log lines; without one, as plain lines on stderr. */
  logger?: Logger;
}

export function defaultVenvDir(name: string, version: string): string {
  return path.join(masCacheDir(), `${name}-${version}`);
}

/** Makes the venv if it is not complete yet; returns its folder (its programs are in bin/). */
export async function ensurePythonVenv(opts: PythonVenvOptions): Promise<string> {
  const { dir, name, version, why, installs, works, ...output } = opts;
  const venv = dir || defaultVenvDir(name, version);
  const marker = path.join(venv, '.mas-complete');
  const python = process.env.PYTHON || 'python3';
  const pip = path.join(venv, 'bin', 'python');
  const steps: [string, string[]][] = [
    [python, ['-m', 'venv', venv]],
    ...installs.map((list): [string, string[]] => [pip, ['-m', 'pip', 'install', '--quiet', '--disable-pip-version-check', ...list]]),
  ];
  const byHand = [...steps.map(([cmd, args]) => [cmd, ...args].map(shellQuote).join(' ')), `touch ${shellQuote(marker)}`].join(' && ');
  await firstUseBuild({
    ...output,
    name: `${name} ${version}`,
    how: `in a Python venv (${python} -m venv, then pip install from PyPI)`,
    why,
    cacheDir: venv,
    isReady: async () => existsSync(marker) && ((await works?.(venv)) ?? true),
    howToFix: `run \`${byHand}\` by hand to see the whole error, or set PYTHON to another Python 3 interpreter (now ${python}) that has the venv module (Debian: apt-get install python3-venv).`,
    async build() {
      await fs.rm(venv, { recursive: true, force: true });
      await fs.mkdir(path.dirname(venv), { recursive: true });
      try {
        for (const [cmd, args] of steps) await run(cmd, args);
      } catch (err) {
        await fs.rm(venv, { recursive: true, force: true });
        throw err;
      }
      await fs.writeFile(marker, `${version}\n`);
    },
  });
  return venv;
}

/**
 * Asynchronous, unlike spawnSync: pip runs for minutes, and a blocked event loop would stop
 * refreshing the build lock, which would then look stale and be taken over by another process.
 */
function run(cmd: string, args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'inherit', 'inherit'] });
    child.once('error', (err) => reject(new Error(`${cmd} ${args.join(' ')} failed (${err.message})`)));
    child.once('exit', (code, signal) => (code === 0 ? resolve() : reject(new Error(`${cmd} ${args.join(' ')} failed (${signal ?? `exit ${code}`})`))));
  });
}

function shellQuote(arg: string): string {
  return /^[\w@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replaceAll("'", `'\\''`)}'`;
}
