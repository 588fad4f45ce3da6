import { ensureTemporalCli } from '../adapters/embedded/temporal-cli.ts';
import { createLogger } from '../config/logger.ts';

/** `npm run setup:temporal`: finds or installs the Temporal CLI ahead of the first start, and prints its path. */
const path = await ensureTemporalCli(createLogger('info', process.stderr));
process.stdout.write(`${path}\n`);
