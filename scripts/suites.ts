import { spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { killLeftoversOnExit, root, sayer, startServer, stopServer, type Server } from './support/server.ts';

/**
 * `npm run test:suites` (CI): the suites that test the real server from outside with its
 * defaults, on one server instead of one each: the MCP authorization conformance scenarios
 * (first: they redeem the demo account's one-time sign-in link), the MCP server conformance
 * suite, then the Python framework matrix. Each is its own script (`npm run test:mcp-auth`,
 * `test:mcp`, `test:frameworks`), which alone starts a server of its own; here they find this one
 * through MAS_SHARED_SERVER (scripts/support/server.ts). A cold start of the service, its
 * embedded PostgreSQL and Temporal dev server is saved per suite. Every suite runs even after
 * one fails; the exit code is non-zero if any did.
 */
const say = sayer('suites');
const SUITES: { name: string; script: string }[] = [
  { name: 'test:mcp-auth', script: 'mcp-auth-conformance.ts' },
  { name: 'test:mcp', script: 'mcp-conformance.ts' },
  { name: 'test:frameworks', script: 'frameworks.ts' },
];

function run(script: string, env: NodeJS.ProcessEnv): Promise<number> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', path.join(root, 'scripts', script)], { cwd: root, stdio: 'inherit', env });
    child.on('error', () => resolve(1));
    child.on('exit', (code, signal) => resolve(code ?? (signal ? 128 : 1)));
  });
}

async function main(): Promise<number> {
  const work = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-suites-'));
  const logFile = path.join(work, 'server.log');
  let server: Server | undefined;
  killLeftoversOnExit(work, () => server);
  try {
    say('starting the shared server');
    server = await startServer(say, work, path.join(work, 'data'), logFile);
    const shared = path.join(work, 'server.json');
    await fs.writeFile(shared, JSON.stringify({ base: server.base, key: server.key, loginUrl: server.loginUrl, logFile, pid: server.child!.pid }), { mode: 0o600 });
    const results: string[] = [];
    let failed = 0;
    for (const suite of SUITES) {
      const started = Date.now();
      say(`${suite.name}`);
      const code = await run(suite.script, { ...process.env, MAS_SHARED_SERVER: shared });
      results.push(`${suite.name}: ${code === 0 ? 'passed' : `FAILED (exit ${code})`} in ${((Date.now() - started) / 1000).toFixed(0)} s`);
      if (code !== 0) failed++;
      if (server.hasExited()) {
        say('the shared server died');
        failed++;
        break;
      }
    }
    for (const line of results) say(line);
    return failed === 0 ? 0 : 1;
  } finally {
    if (server) await stopServer(say, server, work);
    await fs.rm(work, { recursive: true, force: true }).catch(() => undefined);
  }
}

process.exit(await main());
