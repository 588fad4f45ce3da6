import { createRequire } from 'node:module';
import path from 'node:path';
import express, { Router } from 'express';
import type { CoreDeps } from '../../../core/context.ts';
import type { DocumentedModel } from '../../../core/generations/request-document.ts';
import { publicCaller } from '../caller.ts';
import type { DocumentedConfig } from '../openapi.ts';
import { route } from './route.ts';

const require = createRequire(import.meta.url);
/** swagger-ui-dist's static files, served from node_modules: no CDN. */
const SWAGGER_UI = path.dirname(require.resolve('swagger-ui-dist/package.json'));

/**
 * Public: the OpenAPI document and a readable reference page of it. The document states the
 * catalog's media models (their settings and inputs), so it is made from the catalog as it is
 * now, and made again only when that changes.
 */
export function docsRoutes(deps: CoreDeps, publicBaseUrl: string, config: DocumentedConfig): Router {
  const router = Router();
  let made: { catalog: string; document: object } | undefined;
  route(router, '/openapi.json', {
    get: async (req, res) => {
      const { data } = await publicCaller(deps, req).models.catalog({});
      // Media models are the ones with a deadline (text models have a context window instead).
      const media = data.flatMap((m) => ('deadline_seconds' in m ? [{ id: m.id, settings: m.settings, inputs: m.inputs, deadline_seconds: m.deadline_seconds } as DocumentedModel & { id: string }] : []));
      const catalog = JSON.stringify(media);
      // The document's builder (zod-to-openapi and every schema's description) is imported on the first request for it.
      if (made?.catalog !== catalog) made = { catalog, document: (await import('../openapi.ts')).buildOpenApiDocument(publicBaseUrl, config, media) };
      res.json(made.document);
    },
  });
  route(router, '/docs', {
    get: (_req, res) => {
      res.type('html').send(`<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>API reference · Model Access Service</title>
  <link rel="stylesheet" href="docs/assets/swagger-ui.css">
  <link rel="stylesheet" href="docs/page.css">
</head>
<body>
  <header class="mas-bar">
    <a class="mas-brand" href="/">Model Access Service</a>
    <nav aria-label="Site"><a href="/docs">Docs</a> <a href="/models">Models</a> <a href="/account">Your account</a></nav>
  </header>
  <main id="reference" aria-label="API reference"></main>
  <script src="docs/assets/swagger-ui-bundle.js"></script>
  <script src="docs/init.js"></script>
</body>
</html>`);
    },
  });
  // A file, not an inline script: the security policy allows no inline script.
  // Served like the assets, as middleware (not a documented route).
  router.use('/docs/init.js', (_req, res) => {
    res.type('text/javascript').send(INIT_JS);
  });
  // The page's own bar (back to /docs) and what makes Swagger UI pass axe and fit a phone: a file, as the policy allows no inline style.
  router.use('/docs/page.css', (_req, res) => {
    res.type('text/css').send(PAGE_CSS);
  });
  router.use('/docs/assets', express.static(SWAGGER_UI, { index: false, maxAge: '1d', fallthrough: true }));
  return router;
}

/**
 * Swagger UI, started: no deep links (their anchors sit inside each operation's button, a link in a
 * button, which axe's nested-interactive rule refuses), and a name for the servers' select.
 */
const INIT_JS = `SwaggerUIBundle({
  url: 'openapi.json',
  dom_id: '#reference',
  deepLinking: false,
  onComplete: function () {
    var name = function () {
      document.querySelectorAll('#reference select:not([aria-label])').forEach(function (s) { s.setAttribute('aria-label', s.id === 'servers' ? 'Server' : (s.getAttribute('name') || 'Choice')); });
    };
    name();
    new MutationObserver(name).observe(document.getElementById('reference'), { childList: true, subtree: true });
  },
});
`;

/**
 * The reference page's bar and its fixes to Swagger UI: readable contrast on its grey texts and
 * coloured labels (WCAG AA), 44 px targets on a phone (WCAG 2.5.5), long paths that wrap.
 */
const PAGE_CSS = `body { margin: 0; font-family: system-ui, sans-serif; }
.mas-bar { display: flex; flex-wrap: wrap; gap: 0 1rem; align-items: center; padding: 0 1rem; background: #1d2330; }
.mas-bar a { color: #fff; text-decoration: none; display: inline-flex; align-items: center; min-height: 44px; padding: 0 0.4rem; }
.mas-bar .mas-brand { font-weight: 600; }
.mas-bar nav { display: flex; flex-wrap: wrap; gap: 0 0.5rem; }
.swagger-ui .info .title small pre, .swagger-ui .info .title small.version-stamp { background: #3b6b00; }
.swagger-ui .info .title small { background: #5a6475; }
.swagger-ui .opblock-tag small, .swagger-ui .opblock .opblock-summary-description, .swagger-ui .parameter__in, .swagger-ui .parameter__type, .swagger-ui .prop-format, .swagger-ui .response-col_links, .swagger-ui .model .property.primitive, .swagger-ui .renderedMarkdown p, .swagger-ui .markdown p { color: #3b4252; }
.swagger-ui .opblock.opblock-post .opblock-summary-method { background: #1d6b47; }
.swagger-ui .opblock.opblock-get .opblock-summary-method { background: #1f5aa6; }
.swagger-ui .opblock.opblock-delete .opblock-summary-method { background: #b42318; }
.swagger-ui .opblock.opblock-put .opblock-summary-method, .swagger-ui .opblock.opblock-patch .opblock-summary-method { background: #8a4b00; }
.swagger-ui .opblock-summary-path, .swagger-ui .opblock-summary-path__deprecated { word-break: break-all; }
.swagger-ui .info a, .swagger-ui .opblock-tag a, .swagger-ui a.nostyle { color: #1f5aa6; }
.swagger-ui .btn, .swagger-ui .btn > span { color: #1d2330; }
.swagger-ui .btn.authorize, .swagger-ui .btn.authorize span { color: #1d6b47; }
.swagger-ui .json-schema-2020-12-expand-deep-button { color: #1f5aa6; }
.swagger-ui button, .swagger-ui select, .swagger-ui .opblock-summary-control, .swagger-ui .opblock-tag, .swagger-ui .model-box-control, .swagger-ui .info a, .swagger-ui .opblock-tag a, .swagger-ui .tab li button { min-height: 44px; min-width: 44px; }
.swagger-ui .wrapper { padding: 0 1rem; box-sizing: border-box; }
body .swagger-ui section.models h4 button, body .swagger-ui .models-control { min-height: 44px; }
`;
