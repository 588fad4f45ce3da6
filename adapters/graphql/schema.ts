import { printSchema } from './graphql-js.ts';
import { builder } from './builder.ts';
import './schema/account.ts';
import './schema/admin.ts';
import './schema/admin-users.ts';
import './schema/analytics.ts';
import './schema/app-connection.ts';
import './schema/audit.ts';
import './schema/file.ts';
import './schema/generation.ts';
import './schema/key.ts';
import './schema/ledger.ts';
import './schema/model.ts';
import './schema/organization.ts';
import './schema/models-admin.ts';
import './schema/payments.ts';
import './schema/routes.ts';
import './schema/wallet.ts';

/** The admin API's schema: each file of schema/ adds its domain's types, queries and mutations to the one builder. */
export const schema = builder.toSchema();

/** The committed SDL (docs/admin.graphql), which a test keeps current. */
export const SDL_FILE = new URL('../../docs/admin.graphql', import.meta.url);

export const printSdl = () => printSchema(schema);
