import { existsSync } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { chromium, type Browser } from 'playwright-core';
import { ROOT } from './process.ts';

/**
 * A real Chromium for browser tests: Debian's `chromium` (playwright-core downloads nothing).
 * .ci/run installs it when missing; a machine without it fails these tests with this message,
 * never skips them.
 */
export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

export async function launchChromium(): Promise<Browser> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`No Chromium at ${CHROMIUM}: install Debian's chromium (apt-get install chromium, as .ci/run does) or set CHROMIUM_PATH.`);
  }
  // As root, Chromium's sandbox cannot start: --no-sandbox (tests only browse this machine's server).
  return chromium.launch({ executablePath: CHROMIUM, headless: true, args: process.getuid?.() === 0 ? ['--no-sandbox'] : [] });
}

/** Where screenshots go: test/artifacts/ (git-ignored; CI keeps them). */
export async function artifactPath(name: string): Promise<string> {
  const dir = path.join(ROOT, 'test', 'artifacts');
  await fs.mkdir(dir, { recursive: true });
  return path.join(dir, name);
}
