import { spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from './process.ts';
import { systemTool } from './tools.ts';

/**
 * A real Prometheus server: Debian's `prometheus` package (2.42 on Debian 12), found or fetched
 * once per machine by the global setup (scripts/support/system-tools.ts). Each test file starts its own on a free loopback port, with its own configuration and
 * storage in a temporary folder, scraping one target every second, and stops it by its PID
 * (SIGKILL on the test process's exit if the file ends without stopping it).
 */

/** What GET /api/v1/query answers (https://prometheus.io/docs/prometheus/2.42/querying/api/). */
export interface QueryAnswer {
  status: 'success' | 'error';
  data?: { resultType: string; result: { metric: Record<string, string>; value?: [number, string] }[] | [number, string] };
  errorType?: string;
  error?: string;
  warnings?: string[];
}

export interface RunningPrometheus {
  url: string;
  pid: number;
  job: string;
  /** An instant query, evaluated at `time` (default: now). */
  query(expr: string, time?: Date): Promise<QueryAnswer>;
  /**
   * Waits until the target has been scraped successfully `count` times, each starting after
   * `after` (Prometheus' lastScrape, on this machine's clock), and resolves with a time just
   * after the last of them, to evaluate queries at: a scrape that fails later (a slow one on a
   * loaded machine) marks the target's series stale from then on, not before. The test's
   * timeout bounds the wait.
   */
  waitForScrapes(count: number, after: Date): Promise<Date>;
  /** Everything Prometheus wrote to stdout and stderr. */
  output(): string;
  stop(): Promise<void>;
}

interface TargetsAnswer {
  data: { activeTargets: { labels: Record<string, string>; health: string; lastScrape: string; lastError: string }[] };
}

/**
 * Starts Prometheus scraping `target` (an http://host:port URL; its path is the metrics path)
 * every second, and resolves once `up{job="<job>"} == 1`, that is once a scrape worked.
 */
export async function startPrometheus(opts: { target: string; job?: string; bearerToken?: string }): Promise<RunningPrometheus> {
  const job = opts.job ?? 'mas';
  const target = new URL(opts.target);
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-prometheus-'));
  const config = path.join(dir, 'prometheus.yml');
  // JSON is YAML: no YAML writer needed, and every value is quoted as it should be.
  await fs.writeFile(
    config,
    JSON.stringify({
      global: { scrape_interval: '1s', scrape_timeout: '1s', evaluation_interval: '1s' },
      scrape_configs: [
        {
          job_name: job,
          metrics_path: target.pathname === '/' ? '/metrics' : target.pathname,
          scheme: target.protocol.replace(':', ''),
          ...(opts.bearerToken ? { authorization: { type: 'Bearer', credentials: opts.bearerToken } } : {}),
          static_configs: [{ targets: [target.host] }],
        },
      ],
    }),
  );
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const binary = systemTool('prometheus');
  const child = spawn(binary, [`--config.file=${config}`, `--storage.tsdb.path=${path.join(dir, 'data')}`, `--web.listen-address=127.0.0.1:${port}`], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const pid = child.pid;
  if (pid === undefined) throw new Error(`could not start ${binary}`);
  let out = '';
  child.stdout.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr.on('data', (c: Buffer) => (out += c.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const onExit = () => {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone already
    }
  };
  process.once('exit', onExit);

  const query = async (expr: string, time?: Date): Promise<QueryAnswer> => {
    const params = new URLSearchParams({ query: expr, ...(time ? { time: String(time.getTime() / 1000) } : {}) });
    const res = await fetch(`${url}/api/v1/query?${params.toString()}`);
    return (await res.json()) as QueryAnswer;
  };
  const targets = async () => {
    const res = await fetch(`${url}/api/v1/targets?state=active`).catch(() => undefined);
    if (!res?.ok) return undefined;
    return ((await res.json()) as TargetsAnswer).data.activeTargets.filter((t) => t.labels.job === job);
  };

  const stop = async () => {
    process.off('exit', onExit);
    if (child.exitCode === null && child.signalCode === null) {
      process.kill(pid, 'SIGTERM');
      await exited;
    }
    await fs.rm(dir, { recursive: true, force: true });
  };

  try {
    // Ready once a scrape of the target worked, as Prometheus itself says through `up`.
    for (;;) {
      if (child.exitCode !== null) throw new Error(`prometheus exited before it scraped ${opts.target}: ${out.slice(-4000)}`);
      const answer = await query(`up{job="${job}"} == 1`).catch(() => undefined);
      if (answer?.status === 'success' && Array.isArray(answer.data?.result) && answer.data.result.length > 0) break;
      await sleep(100);
    }
  } catch (e) {
    await stop();
    throw e;
  }

  return {
    url,
    pid,
    job,
    query,
    output: () => out,
    async waitForScrapes(count, after) {
      const seen = new Map<string, Date>();
      for (;;) {
        if (child.exitCode !== null) throw new Error(`prometheus exited: ${out.slice(-4000)}`);
        for (const t of (await targets()) ?? []) {
          const at = new Date(t.lastScrape);
          if (t.health === 'up' && at > after) seen.set(t.lastScrape, at);
        }
        if (seen.size >= count) {
          // Half the scrape interval after the last good scrape: its samples are in, the next
          // scrape's (good or stale) are not.
          const last = Math.max(...[...seen.values()].map((d) => d.getTime()));
          return new Date(last + 500);
        }
        await sleep(100);
      }
    },
    stop,
  };
}
