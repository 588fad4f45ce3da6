import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODEL_PICKER_URI, RESULT_VIEW_URI } from '../../adapters/mcp/apps/index.ts';
import { makeAccount, makeKey } from '../support/db.ts';
import { startJobHarness, type JobHarness } from '../support/jobs.ts';

/**
 * MCP Apps (issue 35): the `ui://` views as resources over the official SDK client, on a real
 * server, and the tools that declare them. PUBLIC_BASE_URL is the served URL, as the CSP names it.
 */
let h: JobHarness;
beforeAll(async () => {
  h = await startJobHarness({ publicBaseUrlIsServed: true });
});
afterAll(() => h.close());

const MIME = 'text/html;profile=mcp-app';

async function connect(): Promise<Client> {
  const account = await makeAccount(h.orm, { coins: '100' });
  const key = await makeKey(h.orm, account.id);
  const client = new Client({ name: 'mas-apps-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${h.base}/api/v1/mcp`), { requestInit: { headers: { Authorization: `Bearer ${key.key}` } } }));
  return client;
}

/** The parts of an HTML document that could load anything: its markup outside scripts and styles, its styles, its scripts. */
function partsOf(html: string) {
  const scripts = [...html.matchAll(/<script\b([^>]*)>([\s\S]*?)<\/script>/gi)].map((m) => ({ attrs: m[1]!, body: m[2]! }));
  const styles = [...html.matchAll(/<style\b[^>]*>([\s\S]*?)<\/style>/gi)].map((m) => m[1]!);
  const markup = html.replace(/<script\b[^>]*>[\s\S]*?<\/script>/gi, '').replace(/<style\b[^>]*>[\s\S]*?<\/style>/gi, '');
  return { scripts, styles, markup };
}

describe('MCP Apps', () => {
  it('lists the two ui:// views with the MCP App mime type and a CSP of the service origin alone', async () => {
    const client = await connect();
    expect(client.getServerCapabilities()?.resources).toBeDefined();
    const { resources } = await client.listResources();
    expect(resources.map((r) => r.uri).sort()).toEqual([MODEL_PICKER_URI, RESULT_VIEW_URI].sort());
    for (const r of resources) {
      expect(r.uri).toMatch(/^ui:\/\//);
      expect(r.mimeType).toBe(MIME);
      expect(r._meta).toEqual({ ui: { csp: { connectDomains: [h.base], resourceDomains: [h.base] }, prefersBorder: true } });
    }
    await client.close();
  });

  it('reads each view as one HTML document that loads nothing from anywhere', async () => {
    const client = await connect();
    for (const uri of [RESULT_VIEW_URI, MODEL_PICKER_URI]) {
      const { contents } = await client.readResource({ uri });
      expect(contents).toHaveLength(1);
      const doc = contents[0]! as { uri: string; mimeType: string; text: string; _meta: unknown };
      expect(doc).toMatchObject({ uri, mimeType: MIME, _meta: { ui: { csp: { connectDomains: [h.base], resourceDomains: [h.base] } } } });
      expect(doc.text).toMatch(/^<!doctype html>/i);
      const { scripts, styles, markup } = partsOf(doc.text);
      // No script, style sheet, image, frame or form from elsewhere; no inline event handler.
      expect(markup).not.toMatch(/\b(src|href|action|srcset|poster|data|formaction)\s*=/i);
      expect(markup).not.toMatch(/<(link|iframe|object|embed|base|img|form)\b/i);
      expect(markup).not.toMatch(/\son[a-z]+\s*=/i);
      expect(scripts.length).toBe(1);
      expect(scripts[0]!.attrs).not.toMatch(/\bsrc\s*=/i);
      for (const css of styles) expect(css).not.toMatch(/url\(|@import/i);
      // The only network call is the 3D viewer's fetch of the result link (which the tool result
      // gives, on the declared origin); nothing imports, opens sockets or workers.
      const js = scripts[0]!.body;
      expect(js).not.toMatch(/\bimport\s*\(|importScripts|new\s+(WebSocket|Worker|SharedWorker|EventSource)\b|XMLHttpRequest|sendBeacon|<link|\.src\s*=/);
      expect(js.match(/\bfetch\(/g) ?? []).toHaveLength(uri === RESULT_VIEW_URI ? 1 : 0);
      expect(js).toContain('class'); // the App bundle is there
      expect(js).toMatch(/const App = /);
    }
    await client.close();
  });

  it('answers an unknown ui:// uri with the spec\'s resource-not-found error', async () => {
    const client = await connect();
    const err = await client.readResource({ uri: 'ui://model-access-service/nothing.html' }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(McpError);
    expect((err as McpError).code).toBe(-32002);
    expect((err as McpError).message).toMatch(/Resource not found: ui:\/\/model-access-service\/nothing\.html/);
    await client.close();
  });

  it('declares the views on generate, get_generation, list_generations and list_models, and no other tool', async () => {
    const client = await connect();
    const { tools } = await client.listTools();
    const meta = Object.fromEntries(tools.map((t) => [t.name, t._meta]));
    expect(meta.generate).toEqual({ ui: { resourceUri: RESULT_VIEW_URI }, 'ui/resourceUri': RESULT_VIEW_URI });
    expect(meta.get_generation).toEqual({ ui: { resourceUri: RESULT_VIEW_URI }, 'ui/resourceUri': RESULT_VIEW_URI });
    expect(meta.list_generations).toEqual({ ui: { resourceUri: RESULT_VIEW_URI }, 'ui/resourceUri': RESULT_VIEW_URI });
    expect(meta.list_models).toEqual({ ui: { resourceUri: MODEL_PICKER_URI }, 'ui/resourceUri': MODEL_PICKER_URI });
    for (const name of ['get_model', 'chat', 'upload_file', 'get_balance']) expect(meta[name], name).toBeUndefined();
    await client.close();
  });

  it('still gives every client the text and the resource_link of a result', async () => {
    const client = await connect();
    const r = (await client.callTool({ name: 'generate', arguments: { model: 'mas/image-demo', prompt: 'a lighthouse', settings: { size: 128 } } })) as CallToolResult;
    expect(r.isError).toBeFalsy();
    const job = r.structuredContent as { id: string; status: string; output: { url: string; mime_type: string } };
    expect(job.status).toBe('succeeded');
    expect(r.content.map((c) => c.type)).toEqual(['text', 'resource_link']);
    expect(r.content[1]).toMatchObject({ type: 'resource_link', uri: job.output.url, mimeType: 'image/png' });
    expect((r.content[0] as { text: string }).text).toContain(job.output.url);
    // The signed link may be read by a host's sandboxed frame (another origin, no cookie).
    const res = await fetch(job.output.url, { headers: { Origin: 'null' } });
    expect(res.status).toBe(200);
    expect(res.headers.get('access-control-allow-origin')).toBe('*');
    expect(res.headers.get('cross-origin-resource-policy')).toBe('cross-origin');
    await client.close();
  });
});
