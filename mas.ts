import './config/require-node.ts';
import { runCli } from './adapters/cli/mas.ts';
import { readCatalogYaml } from './config/catalog.ts';
import { openRuntime } from './config/compose.ts';
import { PendingMigrationsError } from './config/database.ts';
import { ConfigError, loadEnv } from './config/env.ts';
import { cliPublicBaseUrl } from './config/server-address.ts';
import { createLogger } from './config/logger.ts';
import { createContext } from './core/context.ts';
import { createCaller } from './core/router.ts';

/** `npm run mas`: the operator CLI, calling core in-process as the internal caller. */
await runCli(process.argv.slice(2), async () => {
  let env;
  try {
    env = loadEnv();
  } catch (err) {
    if (err instanceof ConfigError) return { configError: err.message };
    throw err;
  }
  // Logs go to stderr, and only warnings: stdout is for the one result.
  const logger = createLogger(process.env.LOG_LEVEL ? env.LOG_LEVEL : 'warn', process.stderr);
  // The CLI never migrates an external database (`npm run migrate` does): it refuses while a migration is pending.
  let runtime;
  try {
    runtime = await openRuntime(env, logger, { temporal: false, migrations: 'check' });
  } catch (err) {
    if (err instanceof PendingMigrationsError) return { configError: err.message };
    throw err;
  }
  return {
    core: createCaller(createContext(runtime.deps, { kind: 'internal' })),
    readCatalogFile: () => readCatalogYaml(env.CATALOG_FILE),
    publicBaseUrl: cliPublicBaseUrl(process.env, env),
    close: () => runtime.close(),
  };
});
