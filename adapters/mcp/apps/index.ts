import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { RESOURCE_MIME_TYPE, RESOURCE_URI_META_KEY } from '@modelcontextprotocol/ext-apps/server';

/**
 * MCP Apps (the `io.modelcontextprotocol/ui` extension, SEP-1865, through
 * `@modelcontextprotocol/ext-apps`): `ui://` resources that a host which supports them renders
 * in a sandboxed iframe beside a tool's result, fed that result over postMessage. Every other
 * client ignores them and reads the tool's text and `resource_link` as before.
 *
 * Each resource is one self-contained HTML document: the ext-apps `App` client (its
 * `app-with-deps` bundle, read from node_modules once) and the view's own script and style are
 * inlined, so the document loads nothing from anywhere. Its CSP, declared in `_meta.ui.csp`,
 * allows only this service's origin (PUBLIC_BASE_URL): the result links it shows (img, audio,
 * video) and fetches (a glTF, OBJ or GLB for the 3D viewer).
 */

export { RESOURCE_MIME_TYPE, RESOURCE_URI_META_KEY };

export const RESULT_VIEW_URI = 'ui://model-access-service/result-viewer.html';
export const MODEL_PICKER_URI = 'ui://model-access-service/model-picker.html';

/** What a tool declares to show its results in an app: `_meta.ui.resourceUri`, and the older flat key that ext-apps' registerAppTool also sets. */
export function appToolMeta(resourceUri: string): Record<string, unknown> {
  return { ui: { resourceUri }, [RESOURCE_URI_META_KEY]: resourceUri };
}

/** The resource metadata a host reads to sandbox the view (McpUiResourceMeta). */
export interface AppResourceMeta extends Record<string, unknown> {
  ui: { csp: { connectDomains: string[]; resourceDomains: string[] }; prefersBorder: boolean };
}

interface View {
  uri: string;
  name: string;
  title: string;
  description: string;
  script: string;
}

const VIEWS: View[] = [
  {
    uri: RESULT_VIEW_URI,
    name: 'result-viewer',
    title: 'Generation result',
    description: 'Shows a generation job: the image, an audio or video player or a 3D viewer, its cost and when its link expires; or its status while it runs.',
    script: 'result.js',
  },
  {
    uri: MODEL_PICKER_URI,
    name: 'model-picker',
    title: 'Model picker',
    description: 'The models from list_models with their prices; choosing one asks the conversation to use it.',
    script: 'models.js',
  },
];

/** The CSP metadata for this deployment: only its own origin, for the result links. */
export function appCsp(publicBaseUrl: string): AppResourceMeta {
  const origin = new URL(publicBaseUrl).origin;
  return { ui: { csp: { connectDomains: [origin], resourceDomains: [origin] }, prefersBorder: true } };
}

export interface AppResource {
  uri: string;
  name: string;
  title: string;
  description: string;
  mimeType: string;
  _meta: AppResourceMeta;
}

/** The `ui://` resources, as resources/list describes them. */
export function appResources(publicBaseUrl: string): AppResource[] {
  const meta = appCsp(publicBaseUrl);
  return VIEWS.map((v) => ({ uri: v.uri, name: v.name, title: v.title, description: v.description, mimeType: RESOURCE_MIME_TYPE, _meta: meta }));
}

/** One view's document, or undefined when no view has that uri. */
export function appResourceContents(uri: string, publicBaseUrl: string): { uri: string; mimeType: string; text: string; _meta: AppResourceMeta } | undefined {
  const view = VIEWS.find((v) => v.uri === uri);
  if (!view) return undefined;
  return { uri: view.uri, mimeType: RESOURCE_MIME_TYPE, text: document(view), _meta: appCsp(publicBaseUrl) };
}

const VIEWS_DIR = path.join(import.meta.dirname, 'views');
const documents = new Map<string, string>();

/** The view's HTML, made once per process (the App bundle is about 0.5 MB). */
function document(view: View): string {
  let html = documents.get(view.uri);
  if (html === undefined) {
    const css = readFileSync(path.join(VIEWS_DIR, 'view.css'), 'utf8');
    const shared = readFileSync(path.join(VIEWS_DIR, 'shared.js'), 'utf8');
    const own = readFileSync(path.join(VIEWS_DIR, view.script), 'utf8');
    const script = `${appBundle()}\n${shared}\n${own}`;
    html =
      '<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">' +
      `<title>${view.title}</title><style>${css}</style></head>` +
      `<body><main id="app" aria-live="polite"><h1 class="title">${view.title}</h1><p class="muted">Waiting for the tool's result…</p></main>` +
      `<script type="module">${script.replace(/<\/(script)/gi, '<\\/$1')}</script></body></html>\n`;
    documents.set(view.uri, html);
  }
  return html;
}

let bundle: string | undefined;

/**
 * The ext-apps `App` client as a script to inline: its self-contained ES module bundle with the
 * final export statement replaced by a `const App`, and zod's JIT (which would test `new
 * Function`, a CSP violation without 'unsafe-eval') off before the bundle runs.
 */
export function appBundle(): string {
  if (bundle !== undefined) return bundle;
  const require = createRequire(import.meta.url);
  const source = readFileSync(require.resolve('@modelcontextprotocol/ext-apps/app-with-deps'), 'utf8');
  const exported = /export\s*\{([^}]*)\}\s*;?\s*(\/\/# sourceMappingURL=\S*\s*)?$/.exec(source);
  const local = exported?.[1]!.split(',').map((e) => e.trim().split(/\s+as\s+/)).find((parts) => parts[1] === 'App')?.[0];
  if (!exported || !local) throw new Error('@modelcontextprotocol/ext-apps/app-with-deps no longer ends with an export of App: update adapters/mcp/apps/index.ts');
  bundle = `globalThis.__zod_globalConfig = Object.assign(globalThis.__zod_globalConfig ?? {}, { jitless: true });\n${source.slice(0, exported.index)}\nconst App = ${local};`;
  return bundle;
}
