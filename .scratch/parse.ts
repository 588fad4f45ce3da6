import { chatRequestSchema } from '../core/chat/schema.ts';
import { countChatTokensAsync } from '../core/chat/tokens.ts';
const big = (k: number) => ({ type: 'object', properties: Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [`p${i}_${k}`, { type: 'string', description: `some text ${i}` }])) });
const many = Array.from({ length: 50 }, (_, k) => ({ type: 'function', function: { name: `t${k}`, parameters: big(k) } }));
const text = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], tools: many });
for (let r = 0; r < 3; r++) {
  let t = performance.now(); const body = JSON.parse(text); console.log('parse', performance.now() - t);
  t = performance.now(); const req = chatRequestSchema.parse(body); console.log('zod', performance.now() - t);
  t = performance.now(); let n = 0; for (const tool of req.tools) n += JSON.stringify(tool.parameters).length; console.log('stringify', performance.now() - t);
  let last = performance.now(); let max = 0; const iv = setInterval(() => { const now = performance.now(); max = Math.max(max, now - last); last = now; }, 1);
  t = performance.now(); const c = await countChatTokensAsync(req.messages, { tools: req.tools, stopAbove: 4000 }); clearInterval(iv); console.log('count', c, performance.now() - t, 'maxgap', max);
}
