import { compileSchema, isValidAgainst } from '../core/chat/json-schema.ts';
setTimeout(() => { console.log('timeout'); process.exit(1); }, 8000);
try { await compileSchema({ type: 'strin' } as any, 'p'); } catch (e: any) { console.log('err', e.message); }
console.log(await isValidAgainst({ type: 'string' }, 'x'));
process.exit(0);
