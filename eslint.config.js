import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['node_modules/', '.data/', 'dist/', 'dist.*/', 'coverage/', 'test/artifacts/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
    },
  },
  {
    // The MCP Apps views: browser scripts, inlined one after another into one document
    // (adapters/mcp/apps/index.ts), so shared.js's functions are used by the other files.
    files: ['adapters/mcp/apps/views/*.js'],
    languageOptions: {
      sourceType: 'module',
      globals: { window: 'readonly', document: 'readonly', Node: 'readonly', URL: 'readonly', fetch: 'readonly', TextDecoder: 'readonly', atob: 'readonly', Intl: 'readonly', App: 'readonly' },
    },
    rules: { '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^(_|el$|when$|coins$|truncate$|show$|connectApp$|linkTo$)' }] },
  },
  {
    // Core holds the business rules and knows nothing of the transports that call it.
    files: ['core/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            { group: ['**/adapters/**', '**/config/**', '**/workflows/**'], message: 'core must not import adapters, config or workflows' },
            { group: ['express', 'express/*', '@modelcontextprotocol/*', 'graphql', 'graphql-*', '@pothos/*'], message: 'core must not import a transport' },
          ],
        },
      ],
    },
  },
  {
    // Adapters reach core through its router and the shared modules; the workflow steps
    // (core/internal) are for in-process callers only, and wiring belongs to config/.
    files: ['adapters/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            { group: ['**/core/internal/**'], message: 'the internal router is for workflow activities only: no adapter may expose it' },
            { group: ['**/config/**'], message: 'adapters are wired by the composition root (config/); they do not import it' },
          ],
        },
      ],
    },
  },
  {
    // Workflow code is replayed deterministically in Temporal's sandbox: it may import only
    // @temporalio/workflow, the shared names, other workflows, and types.
    files: ['workflows/*.workflow.ts', 'workflows/shared.ts', 'workflows/index.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              regex: '^(?!@temporalio/workflow$|\\./shared\\.ts$|\\./[\\w-]+\\.workflow\\.ts$)',
              allowTypeImports: true,
              message: 'workflow files import only @temporalio/workflow, ./shared.ts, other workflows and types',
            },
          ],
        },
      ],
    },
  },
  {
    files: ['test/**/*.ts'],
    rules: { '@typescript-eslint/no-explicit-any': 'off', '@typescript-eslint/no-non-null-assertion': 'off' },
  },
  {
    files: ['**/*.js'],
    ...tseslint.configs.disableTypeChecked,
  },
  {
    // The pages' scripts run in the browser.
    files: ['adapters/web/assets/*.js'],
    languageOptions: { globals: { document: 'readonly', navigator: 'readonly', fetch: 'readonly', location: 'readonly', DOMParser: 'readonly', setTimeout: 'readonly' } },
  },
);
