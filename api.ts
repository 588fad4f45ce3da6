import './config/require-node.ts';
import { runServer } from './config/entry.ts';

/**
 * `npm run start:api`: one stateless API instance of many, behind a load balancer, against an
 * external PostgreSQL (DATABASE_URL) and Temporal (TEMPORAL_ADDRESS); no worker, no migration
 * (docs/deploy.md).
 */
await runServer('api');
