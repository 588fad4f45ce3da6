import { execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { firstUseBuild, masCacheDir, which } from '../../adapters/embedded/first-use-build.ts';

const execFileAsync = promisify(execFile);

/**
 * Prometheus' own PromQL parser (github.com/prometheus/prometheus/promql/parser, the Go module
 * of Prometheus 3, tagged v0.316.0), as a small program (test/support/promql-check/main.go)
 * built once under ~/.cache/mas with Go: it reads a JSON list of expressions and answers, for
 * each, its parse error or the metric names it selects. Building only the parser, not the whole
 * of Prometheus or promtool, keeps the first build to a couple of minutes.
 */
export const PROMETHEUS_MODULE_VERSION = 'v0.316.0';
const SOURCE = fileURLToPath(new URL('./promql-check/main.go', import.meta.url));

export function promqlCheckDir(): string {
  return path.join(masCacheDir(), `promql-check-${PROMETHEUS_MODULE_VERSION}`);
}

export async function ensurePromqlCheck(): Promise<string> {
  const dir = promqlCheckDir();
  const binary = path.join(dir, 'promql-check');
  const go = await which('go');
  await firstUseBuild({
    name: "Prometheus' PromQL parser",
    how: `github.com/prometheus/prometheus ${PROMETHEUS_MODULE_VERSION} (promql/parser only) with Go`,
    why: "the Grafana dashboard's queries are checked with Prometheus' own parser",
    cacheDir: dir,
    isReady: () => existsSync(binary),
    howToFix: `install Go, or build test/support/promql-check/main.go by hand in a module that requires github.com/prometheus/prometheus@${PROMETHEUS_MODULE_VERSION} and put the binary at ${binary}.`,
    build: async () => {
      if (!go) throw new Error('Go is not installed');
      await fs.mkdir(dir, { recursive: true });
      const staging = await fs.mkdtemp(path.join(dir, '.staging-'));
      try {
        await fs.copyFile(SOURCE, path.join(staging, 'main.go'));
        await fs.writeFile(path.join(staging, 'go.mod'), 'module mas/promql-check\n\ngo 1.24\n');
        const env = { ...process.env, CGO_ENABLED: '0' };
        await execFileAsync(go, ['get', `github.com/prometheus/prometheus@${PROMETHEUS_MODULE_VERSION}`], { cwd: staging, env, maxBuffer: 64 << 20 });
        await execFileAsync(go, ['mod', 'tidy'], { cwd: staging, env, maxBuffer: 64 << 20 });
        await execFileAsync(go, ['build', '-o', 'promql-check', '.'], { cwd: staging, env, maxBuffer: 64 << 20 });
        await fs.rename(path.join(staging, 'promql-check'), binary);
      } finally {
        await fs.rm(staging, { recursive: true, force: true });
      }
    },
  });
  return binary;
}

export interface PromqlCheck {
  expr: string;
  error?: string;
  metrics: string[];
}

export async function checkPromql(binary: string, exprs: string[]): Promise<PromqlCheck[]> {
  return new Promise((resolve, reject) => {
    const child = spawn(binary, [], { stdio: ['pipe', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.on('error', reject);
    child.on('exit', (code) => (code === 0 ? resolve(JSON.parse(out) as PromqlCheck[]) : reject(new Error(`promql-check exited ${code}`))));
    child.stdin.end(JSON.stringify(exprs));
  });
}
