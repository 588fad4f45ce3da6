import { compileSchema } from '../core/chat/json-schema.ts';
for (let k = 0; k < 4; k++) {
  const big: any = { type: 'object', properties: {} }; for (let i = 0; i < 1000; i++) big.properties['p' + i + '_' + k] = { type: 'string', description: 'some text here ' + i };
  const t = performance.now(); compileSchema(big, 'y'); console.log(JSON.stringify(big).length, 'big compile ms', performance.now() - t);
}
