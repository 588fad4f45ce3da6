import { appendFileSync, existsSync, writeFileSync } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { firstUseBuild } from '../../adapters/embedded/first-use-build.ts';

/**
 * One process of the cross-process tests in test/unit/first-use-build.test.ts:
 *   node --import tsx first-use-build-child.ts <build|hang> <cacheDir> <countFile> <goFile> <staleMs>
 * Says it has started (<countFile>.ready-<pid>), waits for <goFile> so that racing processes
 * start together, then builds <cacheDir>/artifact, appending its pid to <countFile> per build.
 * "hang" never finishes its build: the test kills it while it holds the lock.
 */
const [mode, cacheDir, countFile, goFile, staleMs] = process.argv.slice(2) as [string, string, string, string, string];
const artifact = path.join(cacheDir, 'artifact');

writeFileSync(`${countFile}.ready-${process.pid}`, '');
while (!existsSync(goFile)) await sleep(10);

await firstUseBuild({
  name: 'the test artifact',
  why: 'a test needs it',
  cacheDir,
  howToFix: 'nothing to do',
  tty: true,
  out: (line) => process.stdout.write(`${line}\n`),
  staleMs: Number(staleMs),
  isReady: () => existsSync(artifact),
  async build() {
    appendFileSync(countFile, `${process.pid}\n`);
    if (mode === 'hang') await sleep(3_600_000);
    await sleep(2000); // long enough that the other process is surely waiting
    await fs.mkdir(cacheDir, { recursive: true });
    await fs.writeFile(artifact, 'built');
  },
});
