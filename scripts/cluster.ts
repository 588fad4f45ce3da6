import os from 'node:os';
import path from 'node:path';
import fs from 'node:fs/promises';
import { startCluster } from './support/cluster.ts';
import { sayer } from './support/server.ts';

/**
 * `npm run cluster`: the production layout on this machine (docs/deploy.md): PostgreSQL,
 * Temporal, Redis, nginx in front of API instances, and workers, until Ctrl-C.
 * CLUSTER_APIS and CLUSTER_WORKERS set the counts (2 each); CLUSTER_PORT nginx's port;
 * CLUSTER_DIR the folder (a fresh temporary one by default).
 */
const say = sayer('cluster');
const whole = (name: string, fallback: number | undefined, max: number) => {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  if (!/^\d+$/.test(raw) || Number(raw) < 1 || Number(raw) > max) {
    say(`${name} must be a whole number from 1 to ${max}, not ${JSON.stringify(raw)}`);
    process.exit(2);
  }
  return Number(raw);
};
const dir = process.env.CLUSTER_DIR ? path.resolve(process.env.CLUSTER_DIR) : await fs.mkdtemp(path.join(os.tmpdir(), 'mas-cluster-'));
const cluster = await startCluster({
  dir,
  apis: whole('CLUSTER_APIS', 2, 16),
  workers: whole('CLUSTER_WORKERS', 2, 16),
  port: whole('CLUSTER_PORT', undefined, 65535),
  say,
});
// The environment of this cluster's processes, for the CLI: a file only its owner reads (it holds the database's password).
const envFile = path.join(dir, 'cluster.env');
await fs.writeFile(envFile, Object.entries(cluster.env).filter(([name]) => !['PATH', 'HOME'].includes(name)).map(([name, value]) => `${name}='${value}'\n`).join(''), { mode: 0o600 });
process.stdout.write(
  `\nCluster running in ${dir}\n` +
    `  front (nginx):   ${cluster.url}/api/v1\n` +
    `  API instances:   ${cluster.apis.map((a) => `${a.name} :${a.port}`).join(', ')}\n` +
    `  workers:         ${cluster.workers.map((w) => w.name).join(', ')}\n` +
    `  Temporal UI:     ${cluster.temporalUiUrl}\n` +
    `  logs:            ${path.join(dir, 'logs')}\n\n` +
    `Make an account and a key with the CLI, in this cluster's environment:\n` +
    `  (set -a; . ${envFile}; npm run mas -- account create --email you@example.com)\n\n` +
    `Ctrl-C stops everything.\n`,
);
let stopping = false;
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.on(signal, () => {
    if (stopping) return;
    stopping = true;
    void cluster.stop().then(() => process.exit(0));
  });
}
await new Promise(() => undefined);
