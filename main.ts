import './config/require-node.ts';
import { runServer } from './config/entry.ts';

/** `npm start`: everything on one machine (config/service.ts, role `all`). */
await runServer('all');
