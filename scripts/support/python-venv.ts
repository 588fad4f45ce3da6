import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';

/**
 * Python tools the scripts and benchmarks use (schemathesis, LiteLLM) live in venvs outside the
 * clone, under ~/.cache/mas/<name>-<version>, made on first use from PyPI with pinned
 * requirements.
 *
 * A venv cannot be moved (its scripts name their interpreter by absolute path), so it is built in
 * place and marked complete only once every pip step has succeeded; an unmarked one (an
 * interrupted install) is built again. The version is in the folder's name, so a new pin makes a
 * new venv.
 */
export interface PythonVenvOptions {
  /** The venv's folder; ~/.cache/mas/<name>-<version> by default. */
  dir?: string;
  name: string;
  version: string;
  /** pip requirement lists, installed one after the other (`pip install <list…>`). */
  installs: string[][];
  /** Called once before an install: what is about to happen, for a progress line. */
  say?: (line: string) => void;
  /** A further test of a complete venv (e.g. that its program runs); false builds it again. */
  works?: (venv: string) => boolean;
}

export function defaultVenvDir(name: string, version: string): string {
  return path.join(os.homedir(), '.cache', 'mas', `${name}-${version}`);
}

/** Makes the venv if it is not complete yet; returns its folder (its programs are in bin/). */
export async function ensurePythonVenv(opts: PythonVenvOptions): Promise<string> {
  const venv = opts.dir || defaultVenvDir(opts.name, opts.version);
  const marker = path.join(venv, '.mas-complete');
  if (existsSync(marker) && (opts.works?.(venv) ?? true)) return venv;
  opts.say?.(`installing ${opts.name} ${opts.version} into ${venv} (first time only)`);
  await fs.rm(venv, { recursive: true, force: true });
  await fs.mkdir(path.dirname(venv), { recursive: true });
  const python = process.env.PYTHON || 'python3';
  const steps: [string, string[]][] = [
    [python, ['-m', 'venv', venv]],
    ...opts.installs.map((list): [string, string[]] => [path.join(venv, 'bin', 'python'), ['-m', 'pip', 'install', '--quiet', '--disable-pip-version-check', ...list]]),
  ];
  for (const [cmd, args] of steps) {
    const r = spawnSync(cmd, args, { stdio: ['ignore', 'inherit', 'inherit'] });
    if (r.status !== 0) {
      await fs.rm(venv, { recursive: true, force: true });
      throw new Error(`${cmd} ${args.join(' ')} failed (${r.error?.message ?? `exit ${r.status}`})`);
    }
  }
  await fs.writeFile(marker, `${opts.version}\n`);
  return venv;
}
