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
  <title>Model Access Service API</title>
  <link rel="stylesheet" href="docs/assets/swagger-ui.css">
</head>
<body>
  <div id="reference"></div>
  <script src="docs/assets/swagger-ui-bundle.js"></script>
  <script src="docs/init.js"></script>
</body>
</html>`);
    },
  });
  // A file, not an inline script: the security policy allows no inline script.
  // Served like the assets, as middleware (not a documented route).
  router.use('/docs/init.js', (_req, res) => {
    res.type('text/javascript').send("SwaggerUIBundle({ url: 'openapi.json', dom_id: '#reference', deepLinking: true });\n");
  });
  router.use('/docs/assets', express.static(SWAGGER_UI, { index: false, maxAge: '1d', fallthrough: true }));
  return router;
}
