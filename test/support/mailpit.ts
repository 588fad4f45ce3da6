import { spawn } from 'node:child_process';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import fs from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { firstUseBuild, masCacheDir, which } from '../../adapters/embedded/first-use-build.ts';
import { createLogger } from '../../config/logger.ts';

const execFileAsync = promisify(execFile);

/**
 * mailpit, a real SMTP server with an HTTP API to read what it received: the tests' mail
 * server (SMTP_URL points at it). Found or built with no manual step, like stripe-mock:
 *   1. a `mailpit` on PATH;
 *   2. the cache, ~/.cache/mas/mailpit-v1.33.1/mailpit (XDG_CACHE_HOME respected);
 *   3. `go install github.com/axllent/mailpit@v1.33.1` into the cache, through the Go module
 *      proxy, one process at a time per machine (adapters/embedded/first-use-build.ts).
 * Each test file starts its own on free loopback ports and stops it by its PID.
 */
export const MAILPIT_VERSION = '1.33.1';
const MODULE = `github.com/axllent/mailpit@v${MAILPIT_VERSION}`;

export const mailpitCacheDir = () => path.join(masCacheDir(), `mailpit-v${MAILPIT_VERSION}`);

export async function ensureMailpit(): Promise<string> {
  const onPath = await which('mailpit');
  if (onPath) return onPath;
  const dir = mailpitCacheDir();
  const cached = path.join(dir, 'mailpit');
  const go = await which('go');
  await firstUseBuild({
    logger: createLogger('warn', process.stderr),
    name: 'mailpit',
    how: `v${MAILPIT_VERSION} with go install (a few minutes)`,
    why: 'the mail tests use it as the SMTP server; put `mailpit` on PATH to skip this',
    cacheDir: dir,
    isReady: () => existsSync(cached),
    howToFix: go
      ? `run \`GOBIN=${dir} CGO_ENABLED=0 go install ${MODULE}\` by hand to see the whole error, or put \`mailpit\` on PATH.`
      : `install Go (1.22 or later) and start again, or put \`mailpit\` (${MODULE}) on PATH.`,
    build: async () => {
      if (!go) throw new Error('Go is not installed (no `go` on PATH)');
      await fs.mkdir(dir, { recursive: true });
      // Built into a private folder, then moved into place: nothing ever sees half a binary.
      const staging = await fs.mkdtemp(path.join(dir, '.staging-'));
      try {
        await execFileAsync(go, ['install', MODULE], { env: { ...process.env, GOBIN: staging, CGO_ENABLED: process.env.CGO_ENABLED ?? '0' }, maxBuffer: 64 * 1024 * 1024 });
        await fs.rename(path.join(staging, 'mailpit'), cached);
      } finally {
        await fs.rm(staging, { recursive: true, force: true });
      }
    },
  });
  return cached;
}

/** A port free on the loopback interface now (mailpit does not report a port the system chose). */
async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

export interface MailpitMessage {
  ID: string;
  Subject: string;
  To: { Name: string; Address: string }[];
  From: { Name: string; Address: string };
  Text: string;
  HTML: string;
}

export interface RunningMailpit {
  /** What SMTP_URL takes. */
  smtpUrl: string;
  /** The web UI and API. */
  apiUrl: string;
  pid: number;
  /** The messages to this address, newest first, read whole. */
  messagesTo(address: string): Promise<MailpitMessage[]>;
  /** Waits until a message to `address` whose subject is `subject` arrived (the test's timeout bounds the wait). */
  waitFor(address: string, subject: string): Promise<MailpitMessage>;
  stop(): Promise<void>;
}

export async function startMailpit(): Promise<RunningMailpit> {
  const binary = await ensureMailpit();
  const [smtp, http] = [await freePort(), await freePort()];
  const child = spawn(binary, ['--smtp', `127.0.0.1:${smtp}`, '--listen', `127.0.0.1:${http}`, '--disable-version-check', '--smtp-disable-rdns'], { stdio: ['ignore', 'pipe', 'pipe'] });
  const pid = child.pid;
  if (pid === undefined) throw new Error(`could not start ${binary}`);
  const output: string[] = [];
  child.stdout.on('data', (c: Buffer) => output.push(c.toString()));
  child.stderr.on('data', (c: Buffer) => output.push(c.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const onExit = () => {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone already
    }
  };
  process.once('exit', onExit);
  const apiUrl = `http://127.0.0.1:${http}`;
  // Ready when its API answers (or dead: say why).
  for (;;) {
    if (child.exitCode !== null) throw new Error(`mailpit exited before it listened: ${output.join('').slice(0, 2000)}`);
    const ok = await fetch(`${apiUrl}/api/v1/info`).then((r) => r.ok, () => false);
    if (ok) break;
    await sleep(50);
  }
  const messagesTo = async (address: string): Promise<MailpitMessage[]> => {
    const list = (await (await fetch(`${apiUrl}/api/v1/search?${new URLSearchParams({ query: `to:"${address}"` }).toString()}`)).json()) as { messages: { ID: string }[] };
    return Promise.all(list.messages.map(async (m) => (await (await fetch(`${apiUrl}/api/v1/message/${m.ID}`)).json()) as MailpitMessage));
  };
  return {
    smtpUrl: `smtp://127.0.0.1:${smtp}`,
    apiUrl,
    pid,
    messagesTo,
    async waitFor(address, subject) {
      for (;;) {
        const found = (await messagesTo(address)).find((m) => m.Subject === subject);
        if (found) return found;
        await sleep(50);
      }
    },
    async stop() {
      process.off('exit', onExit);
      if (child.exitCode !== null || child.signalCode !== null) return;
      process.kill(pid, 'SIGTERM');
      await exited;
    },
  };
}
