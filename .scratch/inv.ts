import { compileSchema } from '../core/chat/json-schema.ts';
for (let i = 0; i < 4; i++) {
  const t = performance.now();
  try { compileSchema({ type: 'object', properties: { a: { type: 'strin' + i } } }, 'p'); } catch (e) { }
  console.log('invalid', performance.now() - t);
}
for (let i = 0; i < 3; i++) {
  const t = performance.now();
  compileSchema({ type: 'object', properties: { a: { type: 'string', minLength: i } } }, 'p');
  console.log('valid', performance.now() - t);
}
