import { localProvider } from '../adapters/providers/local.ts';
const p = localProvider();
async function run(req: any) { const out: any[] = []; for await (const e of p.stream({ model: 'echo', maxTokens: 200, options: {}, ...req }, new AbortController().signal)) out.push(e); return out; }
const tools = [{ name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string', minLength: 2 }, unit: { type: 'string', enum: ['c', 'f'] } }, required: ['city', 'unit'], additionalProperties: false } }, { name: 'get_time', parameters: { type: 'object', properties: { tz: { type: 'string', format: 'date-time' } }, required: ['tz'] } }];
console.log(JSON.stringify(await run({ messages: [{ role: 'user', content: 'call get_weather and get_time' }], tools })));
console.log(JSON.stringify(await run({ messages: [{ role: 'user', content: 'hi' }], responseFormat: { type: 'json_schema', name: 'x', schema: { type: 'object', properties: { a: { type: 'integer', minimum: 3 }, b: { type: 'array', items: { type: 'string' } } }, required: ['a', 'b'] } } })));
console.log(JSON.stringify(await run({ messages: [{ role: 'user', content: 'hi there' }], options: { stop: ['said'] } })));
