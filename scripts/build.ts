import { spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { bundleWorkflowCode } from '@temporalio/worker';

/**
 * `npm run build` (and `npm ci`, through `prepare`): the JavaScript that production runs, in
 * dist/. `npm start`, `npm run start:api`, `npm run worker`, `npm run migrate` and the CLI run
 * it with plain node; no transpiler is loaded at run time (tests and scripts still run the
 * TypeScript sources through tsx). Three steps:
 *  1. tsc emits dist/ from the sources (tsconfig.build.json: relative `.ts` imports become `.js`);
 *  2. the files the code reads beside itself (page assets, the MCP Apps views, the common-password list, and
 *     docs/customer/, which the public /docs pages render: dist/docs/customer, as docs/ is beside the sources)
 *     are copied. The operator documents (docs/*.md) are not: nothing in dist/ reads them, and they are not
 *     on the public site;
 *  3. the workflows are bundled once, here, into dist/workflows/bundle.js: a worker started from
 *     dist/ loads that file instead of running webpack at every start (seconds of CPU and about
 *     100 MB of memory the process never gives back).
 */
const root = path.resolve(import.meta.dirname, '..');
const dist = path.join(root, 'dist');
const require = createRequire(import.meta.url);

/** The sources the build reads: a build is stale when one of them is newer than dist/.built. */
export const SOURCES = ['main.ts', 'api.ts', 'worker.ts', 'migrate.ts', 'mas.ts', 'adapters', 'core', 'config', 'workflows', 'docs/customer', 'package.json', 'tsconfig.json', 'tsconfig.build.json'];
const STAMP = path.join(dist, '.built');

/** True when dist/ is missing or older than a source file (the tests build it only then). */
export async function buildIsStale(): Promise<boolean> {
  const built = await fs.stat(STAMP).then((s) => s.mtimeMs, () => 0);
  const newest = async (p: string): Promise<number> => {
    const st = await fs.stat(p).catch(() => undefined);
    if (!st) return 0;
    if (!st.isDirectory()) return st.mtimeMs;
    const names = await fs.readdir(p);
    return Math.max(st.mtimeMs, ...(await Promise.all(names.map((n) => newest(path.join(p, n))))));
  };
  for (const source of SOURCES) if ((await newest(path.join(root, source))) > built) return true;
  return false;
}

/** Builds dist/ when a source is newer (what scripts and benchmarks that run the built service call first). */
export async function ensureBuilt(): Promise<void> {
  if (await buildIsStale()) await build();
}

/**
 * Builds into a fresh folder beside dist/ and then swaps it in, so that a process running
 * from dist/ never sees it half-written.
 */
export async function build(): Promise<void> {
  const next = `${dist}.next-${process.pid}`;
  await fs.rm(next, { recursive: true, force: true });
  const tsc = spawn(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', 'tsconfig.build.json', '--outDir', next], { cwd: root, stdio: 'inherit' });
  const status = await new Promise<number | null>((resolve, reject) => tsc.once('error', reject).once('exit', resolve));
  if (status !== 0) throw new Error(`tsc failed (exit ${status})`);

  for (const asset of ['adapters/web/assets', 'adapters/mcp/apps/views', 'core/accounts/common-passwords.txt', 'docs/customer']) {
    await fs.cp(path.join(root, asset), path.join(next, asset), { recursive: true });
  }

  const { code } = await bundleWorkflowCode({
    workflowsPath: path.join(next, 'workflows', 'index.js'),
    // The Temporal OpenTelemetry workflow interceptors, for traced runs (workflows/trace-interceptors.ts).
    workflowInterceptorModules: [path.join(next, 'workflows', 'trace-interceptors.js')],
    logger: { trace() {}, debug() {}, info() {}, warn: (m) => console.warn(m), error: (m) => console.error(m), log() {} },
  });
  const bundle = withoutSourcesContent(code);
  await fs.writeFile(path.join(next, 'workflows', 'bundle.js'), bundle);
  await fs.writeFile(path.join(next, '.built'), `${new Date().toISOString()}\n`);

  const old = `${dist}.old-${process.pid}`;
  await fs.rename(dist, old).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== 'ENOENT') throw err;
  });
  await fs.rename(next, dist);
  await fs.rm(old, { recursive: true, force: true });
  process.stdout.write(`built dist/ (workflow bundle ${(bundle.length / 1024).toFixed(0)} KiB)\n`);
}

/**
 * The bundle with its inline source map's `sourcesContent` left out (1.2 of its 3.4 MB): the
 * mappings stay, so a workflow's stack traces still name our sources' files and lines, but the
 * text of every bundled source is not held by the worker's threads, nor parsed by the SDK at
 * every start (bench/RESULTS.md, round 4). The SDK requires an inline map, and a debugger
 * reads the sources from disk.
 */
export function withoutSourcesContent(code: string): string {
  const at = code.lastIndexOf('//# sourceMappingURL=data:');
  if (at < 0) throw new Error('the workflow bundle has no inline source map');
  const map = JSON.parse(Buffer.from(code.slice(code.indexOf('base64,', at) + 'base64,'.length).trimEnd(), 'base64').toString()) as { sourcesContent?: unknown };
  delete map.sourcesContent;
  return `${code.slice(0, at)}//# sourceMappingURL=data:application/json;charset=utf-8;base64,${Buffer.from(JSON.stringify(map)).toString('base64')}\n`;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) await build();
