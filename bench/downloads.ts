import { randomBytes } from 'node:crypto';
import { createReadStream, readFileSync } from 'node:fs';
import fs from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { freePort, machine, median, percentile, serviceArgs, start, stealMeter, type Proc } from './support.ts';
import { entryArgs } from '../scripts/support/process.ts';

/**
 * npm run bench:downloads — what concurrent downloads of a big file cost the API process.
 *
 * Starts the service as production runs it (`serviceArgs('main')`, no worker: no job is
 * needed), uploads one file of SIZE_MB megabytes (random bytes: kind "other"), downloads it
 * once to warm up, then CONCURRENCY downloads of it at once through its signed link, ROUNDS
 * times. The API process's resident memory (VmRSS from /proc/<pid>/status) is sampled every
 * 50 ms: before (the median of a quiet second) and the peak during the downloads. Each
 * download's time to first byte (request sent to the first byte of the body) and the
 * aggregate throughput are measured by this process, which only counts the bytes.
 *   SIZE_MB (50, decimal: 50,000,000 bytes), CONCURRENCY (10), ROUNDS (3),
 *   SERVICE_DIR (another checkout's root, to measure its main.ts through tsx instead)
 */
const SIZE = Math.round(Number(process.env.SIZE_MB ?? 50) * 1_000_000);
const CONCURRENCY = Number(process.env.CONCURRENCY ?? 10);
const ROUNDS = Number(process.env.ROUNDS ?? 3);

function vmRssKiB(pid: number): number {
  try {
    // Read synchronously: the sampler's timer must not queue behind the downloads' I/O.
    return Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? NaN);
  } catch {
    return NaN;
  }
}

/** Samples a process's RSS every 50 ms until stopped: every sample, in MiB. */
function sampler(pid: number) {
  const samples: number[] = [];
  const tick = setInterval(() => samples.push(vmRssKiB(pid) / 1024), 50);
  samples.push(vmRssKiB(pid) / 1024);
  return {
    stop: () => {
      clearInterval(tick);
      samples.push(vmRssKiB(pid) / 1024);
      return samples.filter((s) => !Number.isNaN(s));
    },
  };
}

/** POST /files as multipart, the file streamed from disk. */
function upload(base: string, key: string, file: string, size: number): Promise<{ url: string; bytes: number }> {
  const boundary = `mas-bench-${randomBytes(6).toString('hex')}`;
  const head = Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="bench.bin"\r\nContent-Type: application/octet-stream\r\n\r\n`);
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  return new Promise((resolve, reject) => {
    const req = http.request(
      `${base}/api/v1/files`,
      { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': `multipart/form-data; boundary=${boundary}`, 'content-length': head.length + size + tail.length } },
      (res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c.toString()));
        res.on('end', () => (res.statusCode === 200 ? resolve(JSON.parse(body) as { url: string; bytes: number }) : reject(new Error(`upload: ${res.statusCode} ${body}`))));
      },
    );
    req.on('error', reject);
    req.write(head);
    const body = createReadStream(file);
    body.on('error', reject);
    body.on('end', () => req.end(tail));
    body.pipe(req, { end: false });
  });
}

/** One download, the body counted and dropped: time to first body byte, bytes, total time (ms). */
function download(url: string): Promise<{ ttfb: number; bytes: number; ms: number }> {
  return new Promise((resolve, reject) => {
    const began = performance.now();
    let ttfb = NaN;
    http
      .get(url, (res) => {
        if (res.statusCode !== 200) reject(new Error(`download: ${res.statusCode}`));
        let bytes = 0;
        res.on('data', (c: Buffer) => {
          if (bytes === 0) ttfb = performance.now() - began;
          bytes += c.length;
        });
        res.on('end', () => resolve({ ttfb, bytes, ms: performance.now() - began }));
        res.on('error', reject);
      })
      .on('error', reject);
  });
}

async function main() {
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-bench-dl-'));
  const procs: Proc[] = [];
  const steal = stealMeter();
  try {
    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    const env = { DATA_DIR: dataDir, PORT: String(port), HOST: '127.0.0.1', RATE_LIMIT_PER_MINUTE: '1000000000', LOG_LEVEL: 'warn', DEMO_COINS: '0', RUN_WORKER: 'false' };
    const args = process.env.SERVICE_DIR ? ['--import', 'tsx', path.join(path.resolve(process.env.SERVICE_DIR), 'main.ts')] : serviceArgs('main');
    const server = start(process.execPath, args, env);
    procs.push(server);
    await server.waitFor(/listening on/);
    const pid = server.child.pid!;
    const cli = (...a: string[]) => start(process.execPath, [...entryArgs('mas'), ...a, '--json'], env);
    await cli('account', 'create', '--email', 'bench@example.com').waitFor(/"id"/);
    const key = JSON.parse((await cli('key', 'create', '--account', 'bench@example.com').waitFor(/\{.*\}/))[0]).key as string;

    const source = path.join(dataDir, 'bench.bin');
    await fs.writeFile(source, randomBytes(SIZE));
    const file = await upload(base, key, source, SIZE);
    if (file.bytes !== SIZE) throw new Error(`uploaded ${file.bytes} bytes, not ${SIZE}`);
    const signed = new URL(file.url);
    const url = `${base}${signed.pathname}${signed.search}`;

    // Warm-up: JIT, the first read of the file, the first connection.
    await download(url);
    await new Promise((r) => setTimeout(r, 2000));

    const rounds: { before: number; peak: number; ttfb: number[]; seconds: number; bytes: number }[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const quiet = sampler(pid);
      await new Promise((r) => setTimeout(r, 1000));
      const before = median(quiet.stop());
      const during = sampler(pid);
      const began = performance.now();
      const results = await Promise.all(Array.from({ length: CONCURRENCY }, () => download(url)));
      const seconds = (performance.now() - began) / 1000;
      const peak = Math.max(...during.stop());
      for (const r of results) if (r.bytes !== SIZE) throw new Error(`a download got ${r.bytes} bytes, not ${SIZE}`);
      rounds.push({ before, peak, ttfb: results.map((r) => r.ttfb), seconds, bytes: results.reduce((s, r) => s + r.bytes, 0) });
      // Let the garbage collector and the allocator settle before the next quiet second.
      await new Promise((r) => setTimeout(r, 2000));
    }

    const f = (v: number, d = 0) => v.toFixed(d);
    const lines = [
      `Downloads: ${CONCURRENCY} concurrent GETs of one ${f(SIZE / 1e6)} MB file through its signed link, ${ROUNDS} rounds (${process.env.SERVICE_DIR ? `service from ${process.env.SERVICE_DIR}` : args.join(' ')}).`,
      '',
      '| Round | RSS before (MiB) | RSS peak (MiB) | Growth (MiB) | First byte p50 (ms) | First byte max (ms) | Throughput (MB/s) |',
      '|---|---|---|---|---|---|---|',
      ...rounds.map(
        (r, i) =>
          `| ${i + 1} | ${f(r.before)} | ${f(r.peak)} | ${f(r.peak - r.before)} | ${f(percentile(r.ttfb, 50), 1)} | ${f(Math.max(...r.ttfb), 1)} | ${f(r.bytes / 1e6 / r.seconds)} |`,
      ),
      '',
      `Machine: ${machine()}; steal during the run: ${steal()}. Peak RSS of the API process over the whole run (VmHWM): ${f(server.peakRssMiB())} MiB.`,
    ];
    console.log(lines.join('\n'));
  } finally {
    for (const p of procs.reverse()) await p.stop();
    await fs.rm(dataDir, { recursive: true, force: true }).catch(() => undefined);
  }
}

await main();
