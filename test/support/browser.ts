import fs from 'node:fs/promises';
import path from 'node:path';
import AxeBuilder from '@axe-core/playwright';
import { chromium, type Browser, type BrowserContext, type Locator, type Page } from 'playwright-core';
import { expect } from 'vitest';
import { ROOT } from './process.ts';
import { systemTool } from './tools.ts';

/**
 * A real Chromium for browser tests: Debian's `chromium` (playwright-core downloads nothing),
 * found or installed once per machine by the global setup (scripts/support/system-tools.ts); a
 * machine where it cannot be had fails these tests with the reason, never skips them.
 *
 * One Chromium per test worker (the browser tier's files share a worker's process:
 * vitest.config.ts), launched by the first file that asks and kept for the next ones; each file
 * gets a handle whose `close()` closes the contexts and pages that file opened, not the browser.
 * Tests open a fresh context each, as before. Other launch arguments (WebGL's) get a browser of
 * their own, closed with the handle.
 */
const shared = new Map<string, Promise<Browser>>();

export async function launchChromium(extraArgs: string[] = [], executablePath = systemTool('chromium')): Promise<Browser> {
  // As root, Chromium's sandbox cannot start: --no-sandbox (tests only browse this machine's server).
  const launch = () => chromium.launch({ executablePath, headless: true, args: [...(process.getuid?.() === 0 ? ['--no-sandbox'] : []), ...extraArgs] });
  if (extraArgs.length > 0) return launch();
  let browser = shared.get(executablePath);
  if (!browser) {
    browser = launch();
    shared.set(executablePath, browser);
    browser.catch(() => shared.delete(executablePath));
  }
  return fileHandle(await browser);
}

/** The shared browser as one file sees it: what it opens is closed by its `close()`, the browser stays. */
function fileHandle(browser: Browser): Browser {
  const contexts = new Set<BrowserContext>();
  return new Proxy(browser, {
    get(target, prop, receiver) {
      if (prop === 'newContext') {
        return async (...args: Parameters<Browser['newContext']>) => {
          const context = await target.newContext(...args);
          contexts.add(context);
          context.once('close', () => contexts.delete(context));
          return context;
        };
      }
      if (prop === 'newPage') {
        return async (...args: Parameters<Browser['newPage']>) => {
          const page = await target.newPage(...args);
          contexts.add(page.context());
          return page;
        };
      }
      if (prop === 'close') {
        return async () => {
          await Promise.all([...contexts].map((c) => c.close().catch(() => undefined)));
          contexts.clear();
        };
      }
      const value = Reflect.get(target, prop, receiver) as unknown;
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

/** Where screenshots go: test/artifacts/ (git-ignored; CI keeps them). */
export async function artifactPath(name: string): Promise<string> {
  const dir = path.join(ROOT, 'test', 'artifacts');
  await fs.mkdir(dir, { recursive: true });
  return path.join(dir, name);
}

/** What a look at one page found: its width against the window's, and axe-core's serious or critical violations. */
export interface PageFindings {
  scrollWidth: number;
  width: number;
  /** When the page is wider than its window: up to five of the innermost elements that stick out. */
  wide: string[];
  violations: string[];
}

/**
 * Measures the page now shown (issue 34): `document.documentElement.scrollWidth` against the
 * window's width, and axe-core's WCAG 2.1 A and AA rules, keeping the serious and critical
 * violations (each with up to three of its elements).
 */
export async function inspectPage(page: Page): Promise<PageFindings> {
  const { scrollWidth, width, wide } = (await page.evaluate(`(() => {
    const width = window.innerWidth;
    // What sticks out on the right, deepest first, to name in the failure.
    const wide = [...document.querySelectorAll('body *')]
      .filter((e) => e.getBoundingClientRect().right > width + 0.5 && e.children.length === 0)
      .slice(0, 5)
      .map((e) => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + (e.className && typeof e.className === 'string' ? '.' + e.className.split(' ').join('.') : '') + ' (' + Math.round(e.getBoundingClientRect().right) + ' px)');
    return { scrollWidth: document.documentElement.scrollWidth, width, wide };
  })()`)) as { scrollWidth: number; width: number; wide: string[] };
  const axe = await new AxeBuilder({ page }).withTags(['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']).analyze();
  const violations = axe.violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${v.id} (${v.impact}): ${v.nodes.map((n) => n.target.join(' ')).slice(0, 3).join(', ')}`);
  return { scrollWidth, width, wide: scrollWidth > width ? wide : [], violations };
}

/** A screenshot to test/artifacts/`name`, and the page fits its window and passes axe (for the browser tests' screenshots). */
export async function shotAndInspect(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: await artifactPath(name), fullPage: true });
  const found = await inspectPage(page);
  expect({ page: name, tooWide: found.scrollWidth > found.width ? `${found.scrollWidth} px in ${found.width}: ${found.wide.join(', ')}` : null, violations: found.violations }).toEqual({ page: name, tooWide: null, violations: [] });
}

/**
 * Moves the keyboard focus to `target` the way a person without a mouse does: Tab, again and
 * again, from wherever the focus is (at most `max` presses). Fails when Tab never reaches it,
 * which is the bug it looks for.
 */
export async function tabTo(page: Page, target: Locator, max = 80): Promise<void> {
  const name = String(target);
  for (let i = 0; i < max; i++) {
    await page.keyboard.press('Tab');
    if (await target.evaluate((el) => el === el.ownerDocument.activeElement).catch(() => false)) return;
  }
  throw new Error(`Tab never reached ${name} in ${max} presses`);
}
