import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { ensurePythonVenv } from '../scripts/support/python-venv.ts';
import { freePort, processTree, start, type Proc } from './support.ts';

/**
 * LiteLLM Proxy as a peer in `npm run bench:chat`, in front of the same mock upstream.
 *
 * Pinned to 1.102.4: the newest release whose requirements all install from the package index
 * this project uses (1.103.0 and later require a certifi release the index does not have yet;
 * 1.107.0 was a compromised upload and must never be used). Installed with its `proxy` extra
 * (what `litellm --config` needs) and Prisma Client Python (what its database mode needs) into a
 * venv outside the clone: ~/.cache/mas/litellm-<version> (LITELLM_VENV to put it elsewhere).
 *
 * Run as a production deployment would be (LiteLLM's "best practices for production"): a config
 * file, a master key, LITELLM_MODE=PRODUCTION, logs at ERROR, json logs, no callbacks, nothing
 * that calls out to the internet (telemetry off; the model cost map read from the package, not
 * downloaded). One worker (`--num_workers 1`): our gateway is one Node process, so that is the
 * like-for-like comparison; LiteLLM's own guidance is one worker per CPU core and more replicas
 * behind a load balancer for more.
 */
export const LITELLM_VERSION = '1.102.4';
const PRISMA_CLIENT_PY_VERSION = '0.15.0';
export const LITELLM_WORKERS = 1;
export const MASTER_KEY = 'sk-bench-master-key';

export async function ensureLiteLLM(say: (line: string) => void): Promise<string> {
  return ensurePythonVenv({
    dir: process.env.LITELLM_VENV,
    name: 'litellm',
    version: LITELLM_VERSION,
    why: 'the chat benchmark (npm run bench:chat) compares against LiteLLM Proxy; LITELLM_VENV names another venv',
    installs: [[`litellm[proxy]==${LITELLM_VERSION}`, `prisma==${PRISMA_CLIENT_PY_VERSION}`]],
    out: say,
    // Not spawnSync: the import takes seconds, and it runs while the build lock is held (which a
    // blocked event loop would stop refreshing).
    works: (venv) =>
      new Promise<boolean>((resolve) => {
        const child = spawn(path.join(venv, 'bin', 'python'), ['-c', 'import litellm.proxy.proxy_server'], { stdio: 'ignore', timeout: 120_000 });
        child.once('error', () => resolve(false));
        child.once('exit', (code) => resolve(code === 0));
      }),
  });
}

/**
 * LiteLLM's database mode needs Prisma Client Python generated from LiteLLM's schema (its Docker
 * image does this at build time; a pip install needs `prisma generate` once), and its start runs
 * `prisma migrate deploy`. Both run the Prisma CLI, which prisma-client-py installs from the npm
 * registry (prisma@5.17.0, on the machine's node), and the CLI then downloads Prisma's native
 * engines (query engine, schema engine) from Prisma's own download server: neither the npm
 * packages (prisma, @prisma/engines, whose postinstall does the same download) nor any PyPI
 * package ships them. Where that server cannot be reached this fails, and the benchmark skips
 * the database target with the reason. Done once per venv (a marker file).
 */
export async function prepareDatabaseMode(venv: string, say: (line: string) => void): Promise<{ ok: true } | { ok: false; reason: string }> {
  const marker = path.join(venv, '.mas-prisma-generated');
  if (existsSync(marker)) return { ok: true };
  const site = spawnSync(path.join(venv, 'bin', 'python'), ['-c', 'import litellm, os; print(os.path.dirname(litellm.__file__))'], { encoding: 'utf8' });
  const schema = path.join(site.stdout.trim(), 'proxy', 'schema.prisma');
  say(`LiteLLM: prisma generate --schema ${schema} (first time only)`);
  const r = spawnSync(path.join(venv, 'bin', 'prisma'), ['generate', `--schema=${schema}`], {
    encoding: 'utf8',
    timeout: 600_000,
    env: { ...process.env, ...liteLLMEnv(venv, {}) },
  });
  if (r.status !== 0) {
    const lines = `${r.stdout ?? ''}\n${r.stderr ?? ''}`.split('\n').map((l) => l.trim()).filter(Boolean);
    const cause = lines.filter((l) => /error|fail|ENOTFOUND|ECONN/i.test(l)).pop() ?? lines.pop() ?? r.error?.message ?? `exit ${r.status}`;
    return { ok: false, reason: `\`prisma generate\` for LiteLLM's schema failed: the Prisma CLI could not get Prisma's native engines (it downloads them from Prisma's own server, not from a package registry): ${cause}` };
  }
  await fs.writeFile(marker, 'generated\n');
  return { ok: true };
}

/** The environment that keeps LiteLLM off the internet and quiet, as in production. */
function liteLLMEnv(venv: string, extra: Record<string, string>): Record<string, string> {
  return {
    PATH: `${path.join(venv, 'bin')}:${process.env.PATH ?? ''}`,
    VIRTUAL_ENV: venv,
    LITELLM_TELEMETRY: 'False',
    LITELLM_LOCAL_MODEL_COST_MAP: 'True',
    LITELLM_MODE: 'PRODUCTION',
    LITELLM_LOG: 'ERROR',
    JSON_LOGS: 'True',
    // Where LiteLLM would otherwise look for a UI build or ask a registry for updates.
    DISABLE_ADMIN_UI: 'True',
    NO_DOCS: 'True',
    // The Prisma CLI's own usage reports and update checks.
    CHECKPOINT_DISABLE: '1',
    PRISMA_HIDE_UPDATE_MESSAGE: 'true',
    ...extra,
  };
}

export interface LiteLLM {
  url: string;
  proc: Proc;
}

/**
 * Starts `litellm --config <dir>/config.yaml --port <free> --num_workers 1` with one model,
 * `bench/mock`, pointing at the mock's OpenAI-compatible URL. With `databaseUrl`, LiteLLM keeps
 * its keys and spend in that PostgreSQL database (Prisma), as its virtual keys need.
 */
export async function startLiteLLM(opts: { venv: string; dir: string; mockUrl: string; databaseUrl?: string; env?: Record<string, string> }): Promise<LiteLLM> {
  await fs.mkdir(opts.dir, { recursive: true });
  const config = path.join(opts.dir, 'config.yaml');
  await fs.writeFile(
    config,
    [
      'model_list:',
      '  - model_name: bench/mock',
      '    litellm_params:',
      '      model: openai/mock',
      `      api_base: ${opts.mockUrl}`,
      '      api_key: unused',
      'litellm_settings:',
      '  callbacks: []',
      '  success_callback: []',
      '  failure_callback: []',
      '  set_verbose: false',
      '  json_logs: true',
      '  request_timeout: 600',
      '  telemetry: false',
      'general_settings:',
      `  master_key: ${MASTER_KEY}`,
      ...(opts.databaseUrl ? [`  database_url: "${opts.databaseUrl}"`, '  database_connection_pool_limit: 10'] : []),
      '',
    ].join('\n'),
  );
  const port = await freePort();
  const env = liteLLMEnv(opts.venv, { ...(opts.databaseUrl ? { DATABASE_URL: opts.databaseUrl } : {}), ...opts.env });
  const proc = treeStopping(start(path.join(opts.venv, 'bin', 'litellm'), ['--config', config, '--host', '127.0.0.1', '--port', String(port), '--num_workers', String(LITELLM_WORKERS)], env));
  const url = `http://127.0.0.1:${port}`;
  const began = Date.now();
  for (;;) {
    if (proc.child.exitCode !== null) throw new Error(`LiteLLM exited (${proc.child.exitCode}):\n${proc.output().slice(-3000)}`);
    if (Date.now() - began > 300_000) {
      await proc.stop();
      throw new Error(`LiteLLM did not get ready in 300 s:\n${proc.output().slice(-3000)}`);
    }
    const ok = await fetch(`${url}/health/readiness`)
      .then((r) => r.ok)
      .catch(() => false);
    if (ok) return { url, proc };
    await new Promise((r) => setTimeout(r, 500));
  }
}

/** A virtual key from LiteLLM's /key/generate (database mode), made with the master key. */
export async function generateVirtualKey(litellm: LiteLLM): Promise<string> {
  const res = await fetch(`${litellm.url}/key/generate`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${MASTER_KEY}` },
    body: JSON.stringify({ models: ['bench/mock'], key_alias: 'bench', max_budget: 1_000_000 }),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`/key/generate: ${res.status} ${text.slice(0, 500)}`);
  return (JSON.parse(text) as { key: string }).key;
}

/** Stops the whole process tree (the Python server and whatever it started), not only the child. */
function treeStopping(proc: Proc): Proc {
  return {
    ...proc,
    async stop() {
      const pids = proc.child.pid === undefined ? [] : processTree(proc.child.pid).slice(1);
      await Promise.race([proc.stop(), new Promise((r) => setTimeout(r, 15_000))]);
      for (const pid of proc.child.exitCode === null ? [proc.child.pid, ...pids] : pids) {
        try {
          if (pid !== undefined) process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
    },
  };
}
