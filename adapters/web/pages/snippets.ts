/**
 * Ready requests for a model's public page: curl, the openai SDK for Python and for Node, and
 * the MCP connector. Each is built from the model's own example request (core's `example`:
 * the catalog's, or one made from its defaults) and the service's public base URL; the key is
 * the placeholder `$MAS_API_KEY`, read from the environment. Chat models use the OpenAI
 * chat-completions call; media models the REST generations call (`POST /generations`, which the
 * openai SDK has no method for: plain `fetch` and `httpx`).
 * test/unit/model-snippets.test.ts parses every body back.
 */
export interface Snippet {
  id: 'curl' | 'python' | 'node' | 'mcp';
  label: string;
  language: 'sh' | 'python' | 'javascript' | 'json';
  code: string;
}

export interface SnippetModel {
  id: string;
  type: string;
  example?: Record<string, unknown> | undefined;
}

/** The API's base URL (`…/api/v1`) for a public base URL. */
export const apiBase = (publicBaseUrl: string) => `${publicBaseUrl.replace(/\/+$/, '')}/api/v1`;

/** A JSON value as a Python literal: JSON's true, false and null are True, False and None outside strings. */
export function pythonLiteral(value: unknown, indent = 0): string {
  const json = JSON.stringify(value, null, 2) ?? 'None';
  const text = json.replace(/"(?:[^"\\]|\\.)*"|\b(true|false|null)\b/g, (m, word: string | undefined) => (word ? { true: 'True', false: 'False', null: 'None' }[word]! : m));
  return indent ? text.replace(/\n/g, `\n${' '.repeat(indent)}`) : text;
}

/** Text inside single quotes in a POSIX shell. */
const shellQuote = (text: string) => `'${text.replace(/'/g, `'\\''`)}'`;

const MCP_CHAT_ARGS = ['model', 'messages', 'max_tokens', 'temperature', 'top_p'];
const MCP_GENERATE_ARGS = ['model', 'prompt', 'settings', 'inputs'];
const pick = (o: Record<string, unknown>, keys: string[]) => Object.fromEntries(Object.entries(o).filter(([k]) => keys.includes(k)));

export function exampleBody(model: SnippetModel): Record<string, unknown> {
  const chat = model.type === 'text';
  const example = model.example ?? (chat ? { model: model.id, messages: [{ role: 'user', content: 'Hello!' }], max_tokens: 64 } : { model: model.id, prompt: 'A red fox in fresh snow' });
  return { ...example, model: model.id };
}

export function modelSnippets(model: SnippetModel, publicBaseUrl: string): Snippet[] {
  const base = apiBase(publicBaseUrl);
  const body = exampleBody(model);
  const json = JSON.stringify(body, null, 2);
  const chat = model.type === 'text';
  const path = chat ? '/chat/completions' : '/generations';
  const mcpUrl = `${base}/mcp`;

  const curl = [
    `curl ${base}${path} \\`,
    `  -H "Authorization: Bearer $MAS_API_KEY" \\`,
    `  -H "Content-Type: application/json" \\`,
    ...(chat ? [] : [`  -H "Prefer: wait=60" \\`]),
    `  -d ${shellQuote(json)}`,
  ].join('\n');

  const python = chat
    ? [
        'import os',
        'from openai import OpenAI',
        '',
        `client = OpenAI(base_url=${JSON.stringify(base)}, api_key=os.environ["MAS_API_KEY"])`,
        'completion = client.chat.completions.create(',
        ...Object.entries(body).map(([k, v]) => `    ${k}=${pythonLiteral(v, 4)},`),
        ')',
        'print(completion.choices[0].message.content)',
      ].join('\n')
    : [
        '# The openai SDK has no call for media jobs: this is the REST call, with httpx.',
        'import os',
        'import httpx',
        '',
        'job = httpx.post(',
        `    ${JSON.stringify(`${base}/generations`)},`,
        '    headers={"Authorization": f"Bearer {os.environ[\'MAS_API_KEY\']}", "Prefer": "wait=60"},',
        `    json=${pythonLiteral(body, 4)},`,
        '    timeout=90,',
        ').json()',
        '# Still running after 60 s? GET /generations/{id} until its status is final.',
        'print(job["id"], job["status"], job.get("output"))',
      ].join('\n');

  const node = chat
    ? [
        "import OpenAI from 'openai';",
        '',
        `const client = new OpenAI({ baseURL: ${JSON.stringify(base)}, apiKey: process.env.MAS_API_KEY });`,
        `const completion = await client.chat.completions.create(${json});`,
        'console.log(completion.choices[0].message.content);',
      ].join('\n')
    : [
        '// The openai SDK has no call for media jobs: this is the REST call, with fetch.',
        `const res = await fetch(${JSON.stringify(`${base}/generations`)}, {`,
        "  method: 'POST',",
        "  headers: { Authorization: `Bearer ${process.env.MAS_API_KEY}`, 'Content-Type': 'application/json', Prefer: 'wait=60' },",
        `  body: JSON.stringify(${json.replace(/\n/g, '\n  ')}),`,
        '});',
        'const job = await res.json();',
        '// Still running after 60 s? GET /generations/{id} until its status is final.',
        'console.log(job.id, job.status, job.output);',
      ].join('\n');

  const config = { mcpServers: { mas: { url: mcpUrl, headers: { Authorization: 'Bearer $MAS_API_KEY' } } } };
  const call = { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: chat ? 'chat' : 'generate', arguments: pick(body, chat ? MCP_CHAT_ARGS : MCP_GENERATE_ARGS) } };
  const mcp = [
    '// The connector (Claude, Cursor: mcp.json). Put your key in place of $MAS_API_KEY,',
    '// or leave out "headers" and sign in with OAuth when the client asks.',
    JSON.stringify(config, null, 2),
    '',
    `// The tool call an agent then makes (JSON-RPC over POST ${mcpUrl}):`,
    JSON.stringify(call, null, 2),
  ].join('\n');

  return [
    { id: 'curl', label: 'curl', language: 'sh', code: curl },
    { id: 'python', label: chat ? 'Python (openai SDK)' : 'Python (httpx)', language: 'python', code: python },
    { id: 'node', label: chat ? 'Node (openai SDK)' : 'Node (fetch)', language: 'javascript', code: node },
    { id: 'mcp', label: 'MCP connector', language: 'json', code: mcp },
  ];
}

/** A model as the first-request snippets choose among them: the catalog's view. */
export interface FirstRequestModel {
  id: string;
  type: string;
  paid_only: boolean;
  pricing: Record<string, unknown>;
}

/**
 * The model a new key's first request uses: a chat model open to every account (not
 * `paid_only`, so it works on the welcome credit), among those the key may use, the cheapest
 * per million tokens; undefined when there is none.
 */
export function firstRequestModel(models: FirstRequestModel[], allowed: string[] | null): string | undefined {
  const price = (m: FirstRequestModel) => Number(m.pricing.input_per_million ?? 0) + Number(m.pricing.output_per_million ?? 0);
  const open = models.filter((m) => m.type === 'text' && !m.paid_only && (allowed === null || allowed.includes(m.id)));
  return open.sort((a, b) => price(a) - price(b) || a.id.localeCompare(b.id))[0]?.id;
}

/**
 * The request shown right after a key is created (the keys page): a chat completion with that
 * key itself and the API's real base URL (`PUBLIC_BASE_URL` + `/api/v1`), in curl and with the
 * openai SDK for Python and JavaScript, ready to paste and run. The key is in the text: the
 * page that shows it is the one that shows the secret once (`Cache-Control: no-store`).
 */
export function firstRequestSnippets(baseUrl: string, key: string, model: string): Snippet[] {
  const body = { model, messages: [{ role: 'user', content: 'Say hello in one short sentence.' }], max_tokens: 50 };
  const json = JSON.stringify(body, null, 2);
  const curl = [
    `curl ${baseUrl}/chat/completions \\`,
    `  -H "Authorization: Bearer ${key}" \\`,
    `  -H "Content-Type: application/json" \\`,
    `  -d ${shellQuote(json)}`,
  ].join('\n');
  const python = [
    'from openai import OpenAI',
    '',
    'client = OpenAI(',
    `    base_url=${JSON.stringify(baseUrl)},`,
    `    api_key=${JSON.stringify(key)},`,
    ')',
    'completion = client.chat.completions.create(',
    ...Object.entries(body).map(([k, v]) => `    ${k}=${pythonLiteral(v, 4)},`),
    ')',
    'print(completion.choices[0].message.content)',
  ].join('\n');
  const node = [
    "import OpenAI from 'openai';",
    '',
    'const client = new OpenAI({',
    `  baseURL: ${JSON.stringify(baseUrl)},`,
    `  apiKey: ${JSON.stringify(key)},`,
    '});',
    `const completion = await client.chat.completions.create(${json});`,
    'console.log(completion.choices[0].message.content);',
  ].join('\n');
  return [
    { id: 'curl', label: 'curl', language: 'sh', code: curl },
    { id: 'python', label: 'Python (openai SDK)', language: 'python', code: python },
    { id: 'node', label: 'JavaScript (openai SDK)', language: 'javascript', code: node },
  ];
}
