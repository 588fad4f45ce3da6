import { createServer, type Server } from 'node:http';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { build } from 'esbuild';
import type { Browser, Frame, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODEL_PICKER_URI, RESULT_VIEW_URI } from '../../adapters/mcp/apps/index.ts';
import { launchChromium, shotAndInspect } from '../support/browser.ts';
import { makeAccount, makeKey } from '../support/db.ts';
import { startJobHarness, type JobHarness } from '../support/jobs.ts';
import { ROOT } from '../support/process.ts';

/**
 * The MCP Apps views in a real Chromium (issue 35), as a host that supports MCP Apps shows them:
 * a stand-in host page on another origin uses ext-apps' own AppBridge to render each view's
 * HTML (read with resources/read) in a sandboxed iframe, served with the Content-Security-Policy
 * a host builds from the resource's `_meta.ui.csp`, and feeds it real tool results from this
 * server: the demo image, audio, video and 3D results, a running and a failed job, and the model
 * list. Screenshots go to test/artifacts/mcp-apps/.
 */
let h: JobHarness;
let browser: Browser;
let client: Client;
let key: string;
let host: { base: string; server: Server };
const views = new Map<string, { html: string; csp: string }>();

interface UiCsp {
  connectDomains?: string[];
  resourceDomains?: string[];
  frameDomains?: string[];
}

/** The CSP a host applies to a view from its declared domains (the MCP Apps specification's mapping), with nothing else allowed. */
function hostCsp(csp: UiCsp): string {
  const r = (csp.resourceDomains ?? []).join(' ');
  const c = (csp.connectDomains ?? []).join(' ');
  return [
    "default-src 'none'",
    `script-src 'unsafe-inline' ${r}`,
    `style-src 'unsafe-inline' ${r}`,
    `img-src data: blob: ${r}`,
    `media-src data: blob: ${r}`,
    `font-src data: ${r}`,
    `connect-src ${c || "'none'"}`,
    `frame-src ${(csp.frameDomains ?? []).join(' ') || "'none'"}`,
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'none'",
  ].join('; ');
}

const HOST_PAGE = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>Stand-in MCP Apps host</title>
<style>body{margin:0;font:15px/1.4 system-ui,sans-serif} main{padding:8px} h1{font-size:1rem;margin:0 0 8px} iframe{display:block;width:100%;border:1px solid #8c959f;border-radius:8px}</style></head>
<body><main><h1>Stand-in MCP Apps host</h1><div id="slot"></div></main><script type="module" src="/host.js"></script></body></html>`;

/** The host's script: ext-apps' AppBridge over postMessage to the view's frame. */
const HOST_SCRIPT = `
import { AppBridge, PostMessageTransport } from '@modelcontextprotocol/ext-apps/app-bridge';
window.messages = [];
window.mount = async (view, input, result) => {
  const frame = document.createElement('iframe');
  frame.setAttribute('sandbox', 'allow-scripts');
  frame.title = 'Tool result';
  frame.src = '/view/' + view;
  document.getElementById('slot').replaceChildren(frame);
  const bridge = new AppBridge(null, { name: 'stand-in-host', version: '1.0.0' }, { openLinks: {}, message: { text: {} } });
  bridge.onsizechange = ({ height }) => { if (height) frame.height = String(Math.ceil(height) + 2); };
  bridge.onmessage = async (params) => { window.messages.push(params); return {}; };
  bridge.onopenlink = async () => ({});
  const initialized = new Promise((resolve) => { bridge.oninitialized = resolve; });
  await bridge.connect(new PostMessageTransport(frame.contentWindow, frame.contentWindow));
  await initialized;
  if (input) await bridge.sendToolInput({ arguments: input });
  await bridge.sendToolResult(result);
};`;

/**
 * Waits until `expression` holds in the frame, asked from outside through DevTools (which the
 * frame's CSP does not govern). Playwright's waitForFunction polls by evaluating the string in
 * the page, which a view's CSP without 'unsafe-eval' refuses once the first check fails.
 */
async function until(frame: { evaluate(expression: string): Promise<unknown> }, expression: string): Promise<void> {
  // An element not there yet throws in the expression: not yet.
  await expect.poll(() => frame.evaluate(`Boolean(${expression})`).catch(() => false), { timeout: 30_000, interval: 100 }).toBe(true);
}

beforeAll(async () => {
  h = await startJobHarness({ publicBaseUrlIsServed: true });
  const account = await makeAccount(h.orm, { coins: '1000' });
  key = (await makeKey(h.orm, account.id)).key;
  client = new Client({ name: 'mas-apps-browser-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${h.base}/api/v1/mcp`), { requestInit: { headers: { Authorization: `Bearer ${key}` } } }));
  for (const [id, uri] of [['result', RESULT_VIEW_URI], ['models', MODEL_PICKER_URI]] as const) {
    const doc = (await client.readResource({ uri })).contents[0] as unknown as { text: string; _meta: { ui: { csp: UiCsp } } };
    views.set(id, { html: doc.text, csp: hostCsp(doc._meta.ui.csp) });
  }
  const bundled = await build({ stdin: { contents: HOST_SCRIPT, resolveDir: ROOT, loader: 'js' }, bundle: true, format: 'esm', platform: 'browser', write: false });
  const hostJs = bundled.outputFiles[0]!.text;
  // The host on another origin than the service (localhost against 127.0.0.1), as a real host is.
  const server = createServer((req, res) => {
    const path = new URL(req.url ?? '/', 'http://x').pathname;
    const view = path.startsWith('/view/') ? views.get(path.slice('/view/'.length)) : undefined;
    if (path === '/host.html') res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(HOST_PAGE);
    else if (path === '/host.js') res.writeHead(200, { 'content-type': 'text/javascript' }).end(hostJs);
    else if (view) res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'content-security-policy': view.csp }).end(view.html);
    else res.writeHead(404).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  host = { server, base: `http://localhost:${(server.address() as { port: number }).port}` };
  browser = await launchChromium(['--use-angle=swiftshader', '--enable-unsafe-swiftshader']);
});
afterAll(async () => {
  await browser?.close();
  host?.server.closeAllConnections();
  await new Promise((r) => host?.server.close(r));
  await client?.close();
  await h?.close();
});

const call = async (name: string, args: Record<string, unknown>) => {
  const r = (await client.callTool({ name, arguments: args })) as CallToolResult;
  expect(r.isError, JSON.stringify(r.content)).toBeFalsy();
  return r;
};
type Job = { id: string; status: string; output: { url: string; mime_type: string } | null };
const jobOf = (r: CallToolResult) => r.structuredContent as Job;

interface Shown {
  page: Page;
  frame: Frame;
  /** CSP violations in any frame: securitypolicyviolation events and the console's refusals. */
  violations(): Promise<string[]>;
  /** Every URL the page and the view asked for. */
  requests: string[];
}

async function mount(view: 'result' | 'models', input: Record<string, unknown> | undefined, result: CallToolResult): Promise<Shown> {
  const page = await (await browser.newContext({ viewport: { width: 390, height: 844 } })).newPage();
  const refused: string[] = [];
  const requests: string[] = [];
  page.on('console', (m) => {
    if (/Content Security Policy|Refused to/i.test(m.text())) refused.push(m.text());
  });
  page.on('pageerror', (e) => refused.push(`page error: ${String(e)}`));
  page.on('request', (r) => requests.push(r.url()));
  await page.addInitScript(`document.addEventListener('securitypolicyviolation', (e) => { (window.__csp = window.__csp || []).push(e.violatedDirective + ' ' + e.blockedURI); });`);
  await page.goto(`${host.base}/host.html`);
  await until(page, 'typeof window.mount === "function"');
  await page.evaluate(`window.mount(${JSON.stringify(view)}, ${JSON.stringify(input ?? null)}, ${JSON.stringify(result)})`);
  const frame = await (await page.locator('iframe').elementHandle())!.contentFrame();
  expect(frame).not.toBeNull();
  return {
    page,
    frame: frame!,
    requests,
    violations: async () => [...refused, ...((await frame!.evaluate('window.__csp || []')) as string[])],
  };
}

/** The view fits the 390 px phone and loaded nothing but the host's page and the service's links; no CSP violation. */
async function expectClean(shown: Shown, shot: string) {
  expect(await shown.violations()).toEqual([]);
  const allowed = new Set([new URL(host.base).origin, new URL(h.base).origin]);
  expect(shown.requests.filter((u) => !/^(data|blob|about):/.test(u) && !allowed.has(new URL(u).origin))).toEqual([]);
  const { scrollWidth, width } = (await shown.frame.evaluate('({ scrollWidth: document.documentElement.scrollWidth, width: window.innerWidth })')) as { scrollWidth: number; width: number };
  expect(scrollWidth).toBeLessThanOrEqual(width);
  await shotAndInspect(shown.page, `mcp-apps/${shot}.png`);
  await shown.page.context().close();
}

describe('MCP Apps views in Chromium under the declared CSP', () => {
  it('shows the demo image with its cost and expiry', async () => {
    const input = { model: 'mas/image-demo', prompt: 'a lighthouse at dusk', settings: { size: 256 } };
    const result = await call('generate', input);
    const job = jobOf(result);
    const shown = await mount('result', input, result);
    await shown.frame.waitForSelector('img.media');
    await until(shown.frame, 'document.querySelector("img.media").complete && document.querySelector("img.media").naturalWidth > 0');
    expect(await shown.frame.getAttribute('img.media', 'src')).toBe(job.output!.url);
    expect(await shown.frame.evaluate('document.querySelector("img.media").naturalWidth')).toBe(256);
    const text = await shown.frame.locator('main').innerText();
    expect(text).toContain(job.id);
    expect(text).toMatch(/Cost\s+\d+ coins?/);
    expect(text).toMatch(/Link expires\s+\d{1,2} \w{3} \d{4}, \d\d:\d\d UTC/);
    await expectClean(shown, 'image');
  });

  it('plays the demo audio from its signed link', async () => {
    const result = await call('generate', { model: 'mas/audio-demo', prompt: 'a short tune', settings: { duration: 2 } });
    const shown = await mount('result', undefined, result);
    await shown.frame.waitForSelector('audio.media', { state: 'attached' });
    expect(await shown.frame.getAttribute('audio.media', 'src')).toBe(jobOf(result).output!.url);
    await until(shown.frame, 'document.querySelector("audio.media").readyState >= 1');
    expect(await shown.frame.evaluate('document.querySelector("audio.media").duration')).toBeCloseTo(2, 0);
    await expectClean(shown, 'audio');
  });

  it('gives the demo video a player with its signed link, and says when the browser cannot play the format', async () => {
    const result = await call('generate', { model: 'mas/video-demo', prompt: 'waves', settings: { duration: 1 } });
    const job = jobOf(result);
    const shown = await mount('result', undefined, result);
    await shown.frame.waitForSelector('video.media', { state: 'attached' });
    expect(await shown.frame.getAttribute('video.media', 'src')).toBe(job.output!.url);
    expect(job.output!.mime_type).toMatch(/^video\//);
    // The demo's uncompressed AVI is not a format Chromium plays: the view says so instead of a blank player.
    await until(shown.frame, 'document.querySelector("video.media").error !== null || document.querySelector("video.media").readyState >= 1');
    if (await shown.frame.evaluate('document.querySelector("video.media").error !== null')) {
      await expect(shown.frame.locator('text=cannot play').isVisible()).resolves.toBe(true);
      await expect(shown.frame.locator('video.media').isHidden()).resolves.toBe(true);
    }
    await expect(shown.frame.locator('a', { hasText: 'Open the file' }).getAttribute('href')).resolves.toBe(job.output!.url);
    await expectClean(shown, 'video');
  });

  it('draws the demo 3D model with WebGL', async () => {
    const result = await call('generate', { model: 'mas/3d-demo', prompt: 'a pebble', settings: { detail: 'high' } });
    expect(jobOf(result).output!.mime_type).toBe('model/gltf+json');
    const shown = await mount('result', undefined, result);
    await until(shown.frame, '/triangles/.test(document.querySelector("main").innerText) || document.querySelector(".error") !== null');
    expect(await shown.frame.locator('.error').count(), await shown.frame.locator('main').innerText()).toBe(0);
    // Pixels drawn: copy the WebGL canvas onto a 2D one and count the opaque pixels.
    const drawn = (await shown.frame.evaluate(`(() => {
      const gl = document.querySelector('canvas.media');
      const c = document.createElement('canvas'); c.width = gl.width; c.height = gl.height;
      const ctx = c.getContext('2d'); ctx.drawImage(gl, 0, 0);
      const px = ctx.getImageData(0, 0, c.width, c.height).data;
      let opaque = 0, colours = new Set();
      for (let i = 0; i < px.length; i += 4) if (px[i + 3] > 0) { opaque++; colours.add(px[i] + ',' + px[i + 1] + ',' + px[i + 2]); }
      return { opaque, colours: colours.size, total: px.length / 4 };
    })()`)) as { opaque: number; colours: number; total: number };
    expect(drawn.opaque).toBeGreaterThan(drawn.total / 10);
    expect(drawn.colours).toBeGreaterThan(10); // shaded, not a flat fill
    await expectClean(shown, '3d');
  });

  it('shows a running job with its reserved price, and a failed one with its refund', async () => {
    const running = await call('generate', { model: 'mas/image-demo', prompt: 'slow', settings: { size: 128, delay_ms: 240000 }, wait_seconds: 0 });
    const job = jobOf(running);
    expect(['queued', 'running']).toContain(job.status);
    let shown = await mount('result', undefined, running);
    await shown.frame.waitForSelector('dl');
    expect(await shown.frame.locator('main').innerText()).toMatch(/reserved; refunded if it fails/);
    await expectClean(shown, 'running');
    const canceled = await fetch(`${h.base}/api/v1/generations/${job.id}/cancel`, { method: 'POST', headers: { Authorization: `Bearer ${key}` } });
    expect(canceled.status).toBe(200);

    const failed = await call('generate', { model: 'mas/image-demo', prompt: 'broken', settings: { size: 128, fail: true } });
    expect(jobOf(failed).status).toBe('failed');
    shown = await mount('result', undefined, failed);
    await shown.frame.waitForSelector('.error');
    expect(await shown.frame.locator('main').innerText()).toMatch(/Failed: .*refunded/s);
    await expectClean(shown, 'failed');
  });

  it('shows a list of jobs (as list_generations answers), and one job from it', async () => {
    const made = jobOf(await call('generate', { model: 'mas/image-demo', prompt: 'a kite', settings: { size: 128 } }));
    const again = jobOf(await call('get_generation', { id: made.id }));
    const list = { content: [{ type: 'text', text: '1 job' }], structuredContent: { object: 'list', data: [again], has_more: false } } as CallToolResult;
    const shown = await mount('result', undefined, list);
    await shown.frame.getByRole('button', { name: `Show job ${made.id}` }).click();
    await until(shown.frame, 'document.querySelector("img.media")?.complete && document.querySelector("img.media").naturalWidth === 128');
    await shown.frame.getByRole('button', { name: 'Back to the list' }).click();
    expect(await shown.frame.locator('ul.jobs li').count()).toBe(1);
    await expectClean(shown, 'jobs');
  });

  it('lists the models with prices, and choosing one sends the host a message', async () => {
    const result = await call('list_models', {});
    const models = (result.structuredContent as { data: { id: string; name: string }[] }).data;
    const shown = await mount('models', {}, result);
    await shown.frame.waitForSelector('ul.models li');
    expect(await shown.frame.locator('ul.models li').count()).toBe(models.length);
    const image = models.find((m) => m.id === 'mas/image-demo')!;
    const row = shown.frame.locator('ul.models li', { hasText: image.id });
    expect(await row.innerText()).toMatch(/from \d+ coins a job/);
    await shown.frame.getByRole('button', { name: `Use ${image.name} (${image.id})` }).click();
    await until(shown.page, 'window.messages.length > 0');
    expect(JSON.stringify(await shown.page.evaluate('window.messages'))).toContain('mas/image-demo');
    await shown.frame.selectOption('#type', 'image');
    expect(await shown.frame.locator('ul.models li').count()).toBe(models.filter((m) => (m as { type?: string }).type === 'image').length);
    await expectClean(shown, 'models');
  });
});
