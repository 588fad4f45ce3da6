import { createRequire } from 'node:module';
import path from 'node:path';
import express, { Router } from 'express';
import { buildOpenApiDocument } from '../openapi.ts';
import { route } from './route.ts';

const require = createRequire(import.meta.url);
/** swagger-ui-dist's static files, served from node_modules: no CDN. */
const SWAGGER_UI = path.dirname(require.resolve('swagger-ui-dist/package.json'));

/** Public: the OpenAPI document and a readable reference page of it. */
export function docsRoutes(publicBaseUrl: string): Router {
  const router = Router();
  const document = buildOpenApiDocument(publicBaseUrl);
  route(router, '/openapi.json', {
    get: (_req, res) => {
      res.json(document);
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
