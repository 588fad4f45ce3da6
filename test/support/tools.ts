import { spawn, type ChildProcess } from 'node:child_process';
import { inject } from 'vitest';
import { freePort } from './process.ts';

/**
 * The servers the tests run beside the service, as the global setup found or fetched them
 * (scripts/support/system-tools.ts): the path of the executable. One that could not be had on
 * this machine fails the test that needs it, with the reason; no test skips for want of it.
 */
export function systemTool(name: 'redisServer' | 'prometheus' | 'chromium'): string {
  const found = inject(name);
  if (!found || found.startsWith('unavailable: ')) {
    throw new Error(`${name}: ${found ? found.slice('unavailable: '.length) : 'not looked for by the global setup (run it through vitest.config.ts)'}`);
  }
  return found;
}

export interface RunningRedis {
  url: string;
  child: ChildProcess;
  stop(): void;
}

/** A real Redis of this test's own, on a free loopback port, nothing saved to disk. */
export async function startRedis(): Promise<RunningRedis> {
  const port = await freePort();
  const child = spawn(systemTool('redisServer'), ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise<void>((resolve, reject) => {
    child.stdout!.on('data', (c: Buffer) => c.toString().includes('Ready to accept connections') && resolve());
    child.once('exit', (code) => reject(new Error(`redis-server exited with ${code}`)));
  });
  return { url: `redis://127.0.0.1:${port}`, child, stop: () => void child.kill() };
}
