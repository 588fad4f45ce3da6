import { Ajv } from 'ajv';
import addFormats from 'ajv-formats';
const mk=()=>{const a=new Ajv({strict:false,logger:false}); addFormats.default(a); return a;};
let t=performance.now(); for(let i=0;i<5;i++) mk(); console.log('5 new Ajv', performance.now()-t);
t=performance.now(); for(let i=0;i<20;i++) mk(); console.log('20 new Ajv', performance.now()-t);
const a0=mk();
const big:any={type:'object',properties:{}}; for(let i=0;i<1200;i++) big.properties['p'+i]={type:'string',description:'some text here '+i};
for (const opts of [{}, {code:{optimize:false}}, {code:{optimize:false, lines:false}, inlineRefs:false}]) {
  const a=new Ajv({strict:false,logger:false,...opts} as any);
  t=performance.now(); a.compile(big); console.log('big', JSON.stringify(opts), performance.now()-t);
  const b=structuredClone(big); b.properties.extra={type:'number'};
  t=performance.now(); a.compile(b); console.log('big again', performance.now()-t);
}
t=performance.now(); a0.validateSchema(big); console.log('validateSchema', performance.now()-t);
