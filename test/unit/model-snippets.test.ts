import { describe, expect, it } from 'vitest';
import { modelSnippets, pythonLiteral } from '../../adapters/web/pages/snippets.ts';

/** The ready requests of the model pages (adapters/web/pages/snippets.ts): every body parses back and names the model. */
const BASE = 'https://mas.example.com';
const chatModel = { id: 'mas/echo', type: 'text', example: { model: 'mas/echo', messages: [{ role: 'user', content: "Say hello, it's me." }], max_tokens: 64 } };
const imageModel = { id: 'mas/image-demo', type: 'image', example: { model: 'mas/image-demo', prompt: 'A red fox', settings: { size: 256, seed: 0, fail: false } } };

const byId = (snippets: ReturnType<typeof modelSnippets>, id: string) => snippets.find((s) => s.id === id)!.code;

/** The JSON after `-d` in a curl command, its single quotes unescaped as a shell does. */
function curlBody(code: string): unknown {
  const m = /-d '([\s\S]*)'$/.exec(code);
  expect(m, code).not.toBeNull();
  return JSON.parse(m![1]!.replace(/'\\''/g, "'"));
}

/** A Python literal back to JSON: True, False, None outside strings. */
const fromPython = (text: string) => JSON.parse(text.replace(/"(?:[^"\\]|\\.)*"|\b(True|False|None)\b/g, (m, w: string | undefined) => (w ? { True: 'true', False: 'false', None: 'null' }[w]! : m)));

/** The `{…}` object literal that starts at `start` in `code` (balanced braces, strings skipped). */
function objectAt(code: string, start: number): string {
  let depth = 0;
  for (let i = start; i < code.length; i++) {
    const c = code[i];
    if (c === '"') {
      i++;
      while (code[i] !== '"') i += code[i] === '\\' ? 2 : 1;
    } else if (c === '{') depth++;
    else if (c === '}' && --depth === 0) return code.slice(start, i + 1);
  }
  throw new Error('unbalanced');
}

describe('model snippets', () => {
  it('chat: curl posts the example to /chat/completions, the SDKs use the API base URL and chat.completions.create', () => {
    const s = modelSnippets(chatModel, BASE);
    expect(s.map((x) => x.id)).toEqual(['curl', 'python', 'node', 'mcp']);
    const curl = byId(s, 'curl');
    expect(curl).toMatch(/^curl https:\/\/mas\.example\.com\/api\/v1\/chat\/completions \\/);
    expect(curl).toContain('-H "Authorization: Bearer $MAS_API_KEY"');
    expect(curlBody(curl)).toEqual(chatModel.example);

    const py = byId(s, 'python');
    expect(py).toContain('from openai import OpenAI');
    expect(py).toContain('OpenAI(base_url="https://mas.example.com/api/v1", api_key=os.environ["MAS_API_KEY"])');
    expect(py).toContain('client.chat.completions.create(');
    expect(py).toContain('model="mas/echo",');
    expect(fromPython(objectAt(py, py.indexOf('{')))).toEqual(chatModel.example.messages[0]);

    const node = byId(s, 'node');
    expect(node).toContain("import OpenAI from 'openai';");
    expect(node).toContain('new OpenAI({ baseURL: "https://mas.example.com/api/v1", apiKey: process.env.MAS_API_KEY })');
    const call = node.indexOf('client.chat.completions.create(');
    expect(call).toBeGreaterThan(0);
    expect(JSON.parse(objectAt(node, node.indexOf('{', call)))).toEqual(chatModel.example);
  });

  it('media: curl and fetch POST /generations, httpx posts the same body; the openai SDK is not used', () => {
    const s = modelSnippets(imageModel, 'https://mas.example.com/');
    const curl = byId(s, 'curl');
    expect(curl).toMatch(/^curl https:\/\/mas\.example\.com\/api\/v1\/generations \\/);
    expect(curlBody(curl)).toEqual(imageModel.example);

    const py = byId(s, 'python');
    expect(py).toContain('httpx.post(\n    "https://mas.example.com/api/v1/generations",');
    expect(py).not.toContain('from openai');
    const json = py.indexOf('json=');
    expect(fromPython(objectAt(py, json + 5))).toEqual(imageModel.example);
    expect(py).toContain('"fail": False');

    const node = byId(s, 'node');
    expect(node).toContain('await fetch("https://mas.example.com/api/v1/generations", {');
    expect(node).toContain("method: 'POST'");
    expect(JSON.parse(objectAt(node, node.indexOf('{', node.indexOf('JSON.stringify('))))).toEqual(imageModel.example);
  });

  it('MCP: the connector config names the server URL, and the tool call is generate or chat with the model', () => {
    const media = byId(modelSnippets(imageModel, BASE), 'mcp');
    const blocks = media.split('\n').filter((l) => !l.startsWith('//')).join('\n').split(/\n\n/);
    const config = JSON.parse(blocks[0]!) as { mcpServers: { mas: { url: string } } };
    expect(config.mcpServers.mas.url).toBe('https://mas.example.com/api/v1/mcp');
    const call = JSON.parse(blocks[1]!) as { method: string; params: { name: string; arguments: Record<string, unknown> } };
    expect(call).toMatchObject({ method: 'tools/call', params: { name: 'generate', arguments: { model: 'mas/image-demo', prompt: 'A red fox' } } });
    const chat = byId(modelSnippets(chatModel, BASE), 'mcp');
    const chatCall = JSON.parse(chat.split('\n').filter((l) => !l.startsWith('//')).join('\n').split(/\n\n/)[1]!) as { params: { name: string; arguments: Record<string, unknown> } };
    expect(chatCall.params).toEqual({ name: 'chat', arguments: chatModel.example });
  });

  it('a model without an example gets one that names it', () => {
    const s = modelSnippets({ id: 'x/y', type: 'video' }, BASE);
    expect(curlBody(byId(s, 'curl'))).toMatchObject({ model: 'x/y' });
    expect(pythonLiteral({ a: [true, null, 'true'] })).toBe('{\n  "a": [\n    True,\n    None,\n    "true"\n  ]\n}');
  });
});
