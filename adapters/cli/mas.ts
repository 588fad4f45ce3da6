import { parseArgs, type ParseArgsOptionsConfig } from 'node:util';
import { publicError, type CoreError } from '../../core/errors.ts';
import type { createCaller } from '../../core/router.ts';
import { toCoreError } from '../../core/trpc.ts';

/**
 * `mas`, the operator CLI: a thin adapter over the same core use cases as the API. It works
 * whether or not the server runs (both share the database, embedded or not). With --json it
 * prints exactly one JSON object on stdout; errors are {"error":{message,type,code}} and a
 * non-zero exit.
 */
type Caller = ReturnType<typeof createCaller>;
type Flags = Record<string, string | undefined>;

/** What the entry point (mas.ts, a composition root) hands the CLI: core as the internal caller. */
export interface CliConnection {
  core: Caller;
  /** The catalog file named by CATALOG_FILE, parsed (for `catalog sync`). */
  readCatalogFile(): Promise<unknown>;
  /** Where the pages are served, as the server resolves it (config/env.ts publicBaseUrl: PUBLIC_BASE_URL, else http://localhost:$PORT), for the links it prints. */
  publicBaseUrl: string;
  close(): Promise<void>;
}

/** Opens the connection; `configError` when the environment is not valid. */
export type Connect = () => Promise<CliConnection | { configError: string }>;

interface CommandContext {
  readCatalogFile(): Promise<unknown>;
  publicBaseUrl: string;
}

interface Command {
  usage: string;
  run: (core: Caller, flags: Flags, context: CommandContext) => Promise<unknown>;
  /** Human-readable output; JSON is printed when absent or with --json. */
  show?: (result: never) => string;
}

const COMMANDS: Record<string, Command> = {
  'account create': {
    usage: 'account create --email E',
    run: async (core, f) => {
      const a = await core.accounts.create({ email: f.email! });
      return { id: a.id, email: a.email };
    },
  },
  'account set-password': {
    usage: 'account set-password --account ID|EMAIL [--password P | --password-stdin]   (asked without echo when neither; ends its sessions)',
    run: async (core, f) => {
      const password = f.password ?? (await readSecret('Password: ', f['password-stdin'] !== undefined));
      const a = await core.accounts.setPassword({ account: f.account!, password });
      return { id: a.id, email: a.email, password_set: a.password_set, sessions_ended: a.sessions_ended };
    },
    show: (a: { id: string; email: string; sessions_ended: number }) => `Password set for ${a.email} (${a.id}); ${a.sessions_ended} session(s) ended.`,
  },
  'account login-link': {
    usage: 'account login-link --account ID|EMAIL   (a one-time sign-in link, valid 15 minutes)',
    run: async (core, f, { publicBaseUrl }) => {
      const link = await core.accounts.loginLink({ account: f.account! });
      const url = `${publicBaseUrl}/login/link?token=${encodeURIComponent(link.token)}`;
      return { account: link.account, email: link.email, url, expires_at: link.expires_at };
    },
    show: (l: { email: string; url: string; expires_at: string }) =>
      `Sign-in link for ${l.email}, valid once until ${l.expires_at}. It signs in as this account: give it only to its owner.\n\n  ${l.url}\n`,
  },
  'account end-sessions': {
    usage: 'account end-sessions --account ID|EMAIL [--reason R]   (signs the account out of its pages everywhere, at once)',
    run: (core, f) => core.admin.actions.endSessions({ account: f.account!, reason: f.reason }),
    show: (a: { id: string; email: string; sessions_ended: number }) => `${a.sessions_ended} session(s) of ${a.email} (${a.id}) ended.`,
  },
  'wallet topup': {
    usage: "wallet topup --account ID|EMAIL | --organization ORGID --coins N [--idempotency-key K]   (purchased coins, to a person's or an organization's wallet)",
    run: (core, f) => core.wallet.topUp({ ...walletOwner(f), coins: f.coins!, idempotency_key: f['idempotency-key'] }),
  },
  'subscription grant': {
    usage: 'subscription grant --account ID|EMAIL | --organization ORGID --coins N [--idempotency-key K]',
    run: (core, f) => core.wallet.grantSubscription({ ...walletOwner(f), coins: f.coins!, idempotency_key: f['idempotency-key'] }),
  },
  'key create': {
    usage:
      'key create --account ID|EMAIL [--organization ORGID] [--management] [--name N] [--spend-limit-coins C [--spend-limit-period total|monthly]] [--expires-at DATE] [--allowed-models ID,ID]   (--organization: a key of that organization\'s wallet, owned by the member --account; --management: manages keys and organizations, never calls models)',
    run: async (core, f) => {
      const period = f['spend-limit-period'];
      const k = await core.keys.create({
        account: f.account!,
        ...(f.organization !== undefined ? { organization: f.organization } : {}),
        ...(f.management !== undefined ? { management: true } : {}),
        name: f.name,
        ...(f['spend-limit-coins'] !== undefined ? { spend_limit_coins: f['spend-limit-coins'] } : {}),
        // An unknown period is core's 400, naming the field.
        ...(period !== undefined ? { spend_limit_period: period as 'total' | 'monthly' } : {}),
        ...(f['expires-at'] !== undefined ? { expires_at: f['expires-at'] } : {}),
        ...(f['allowed-models'] !== undefined ? { allowed_models: f['allowed-models'].split(',').map((m) => m.trim()).filter(Boolean) } : {}),
      });
      return { id: k.id, key: k.key, name: k.name, prefix: k.prefix, type: k.type, organization_id: k.organization_id, user_id: k.user_id, created_at: k.created_at };
    },
    show: (k: { id: string; key: string; name: string; type: string; organization_id: string | null }) =>
      `Created ${k.type === 'management' ? 'management key' : 'key'} ${k.id} (${k.name})${k.organization_id ? ` of the organization ${k.organization_id}` : ''}. The key, shown only this once:\n\n  ${k.key}\n`,
  },
  'key list': {
    usage: 'key list --account ID|EMAIL',
    run: async (core, f) => {
      const { data } = await core.keys.list({ account: f.account! });
      return {
        data: data.map(({ id, name, prefix, created_at, last_used_at, revoked_at, spend_limit_coins, spend_limit_period, expires_at, allowed_models, usage_coins, remaining_coins }) => ({
          id, name, prefix, created_at, last_used_at, revoked_at, spend_limit_coins, spend_limit_period, expires_at, allowed_models, usage_coins, remaining_coins,
        })),
      };
    },
  },
  'key revoke': {
    usage: 'key revoke --id KEYID',
    run: (core, f) => core.keys.revoke({ id: f.id! }),
  },
  'org list': {
    usage: 'org list [--name TEXT] [--account ID]   (organizations, newest first, at most 100; --account: those this person acct_… belongs to)',
    run: async (core, f) => {
      const page = await core.admin.read.organizations.list({ first: 100, ...(f.name !== undefined ? { name_contains: f.name } : {}), ...(f.account !== undefined ? { member: f.account } : {}) });
      return { data: page.data, has_more: page.has_more };
    },
  },
  'org show': {
    usage: 'org show --id ORGID   (an organization with its balance, members and pending invitations)',
    run: (core, f) => core.admin.read.organizations.get({ id: f.id! }),
  },
  'app revoke': {
    usage: 'app revoke --id APPCONNECTIONID [--reason R]   (an OAuth app connection and its key, at once)',
    run: (core, f) => core.admin.actions.revokeAppConnection({ id: f.id!, reason: f.reason }),
  },
  'admin create': {
    usage: 'admin create --email E --role viewer|operator   (an admin user for the admin pages; prints a one-time sign-in link, valid 24 hours)',
    run: async (core, f, { publicBaseUrl }) => {
      const made = await core.admin.users.create({ email: f.email!, role: f.role as 'viewer' });
      const url = `${publicBaseUrl}/admin/login/link?token=${encodeURIComponent(made.login_token)}`;
      return { id: made.id, email: made.email, role: made.role, url, expires_at: made.login_expires_at };
    },
    show: (a: { id: string; email: string; role: string; url: string; expires_at: string }) =>
      `Created admin ${a.email} (${a.id}, ${a.role}). Their one-time sign-in link, valid until ${a.expires_at}; it lets them choose a password:\n\n  ${a.url}\n`,
  },
  'admin login-link': {
    usage: 'admin login-link --id ADMINUSERID   (a new one-time sign-in link for an admin user)',
    run: async (core, f, { publicBaseUrl }) => {
      const made = await core.admin.users.loginLink({ id: f.id! });
      return { id: made.id, email: made.email, url: `${publicBaseUrl}/admin/login/link?token=${encodeURIComponent(made.login_token)}`, expires_at: made.login_expires_at };
    },
  },
  'admin token create': {
    usage: 'admin token create --name N --role viewer|operator   (a token for the admin API, shown once)',
    run: (core, f) => core.admins.createToken({ name: f.name!, role: f.role as 'viewer' }),
  },
  'admin token revoke': {
    usage: 'admin token revoke --id ADMINTOKENID',
    run: (core, f) => core.admins.revokeToken({ id: f.id! }),
  },
  'catalog sync': {
    usage: 'catalog sync   (makes the database\'s models match CATALOG_FILE)',
    run: async (core, _f, { readCatalogFile }) => core.catalog.sync({ catalog: await readCatalogFile() }),
  },
  balance: {
    usage: 'balance --account ID|EMAIL',
    run: (core, f) => core.wallet.balanceOf({ account: f.account! }),
  },
};


/** `--account` or `--organization`: core refuses both or neither, naming the field. */
const walletOwner = (f: Flags) => ({ ...(f.account !== undefined ? { account: f.account } : {}), ...(f.organization !== undefined ? { organization: f.organization } : {}) });

/**
 * A secret read from standard input, never echoed: from a terminal, typed after a prompt on
 * stderr with echo off; otherwise (`--password-stdin`, a pipe) its first line.
 */
async function readSecret(prompt: string, fromPipe: boolean): Promise<string> {
  const input = process.stdin;
  if (!input.isTTY || fromPipe) {
    let text = '';
    for await (const chunk of input) {
      text += String(chunk);
      if (text.includes('\n')) break;
    }
    return text.split(/\r?\n/)[0]!;
  }
  process.stderr.write(prompt);
  input.setRawMode(true);
  input.setEncoding('utf8');
  try {
    return await new Promise<string>((resolve, reject) => {
      let typed = '';
      const onData = (chunk: string) => {
        for (const ch of chunk) {
          if (ch === '\r' || ch === '\n') {
            input.off('data', onData);
            return resolve(typed);
          }
          if (ch === '\u0003') {
            input.off('data', onData);
            return reject(new Error('canceled'));
          }
          if (ch === '\u007f' || ch === '\b') typed = typed.slice(0, -1);
          else typed += ch;
        }
      };
      input.on('data', onData);
    });
  } finally {
    input.setRawMode(false);
    input.pause();
    process.stderr.write('\n');
  }
}

/**
 * Every flag any command's usage names (a test holds the two together: a flag in a usage line
 * that the parser does not know is refused before the command runs).
 */
export const OPTIONS = {
  json: { type: 'boolean', default: false },
  help: { type: 'boolean', short: 'h', default: false },
  email: { type: 'string' },
  account: { type: 'string' },
  organization: { type: 'string' },
  management: { type: 'boolean' },
  coins: { type: 'string' },
  name: { type: 'string' },
  id: { type: 'string' },
  role: { type: 'string' },
  password: { type: 'string' },
  'password-stdin': { type: 'boolean' },
  'idempotency-key': { type: 'string' },
  reason: { type: 'string' },
  'spend-limit-coins': { type: 'string' },
  'spend-limit-period': { type: 'string' },
  'expires-at': { type: 'string' },
  'allowed-models': { type: 'string' },
} as const satisfies ParseArgsOptionsConfig;

/** The usage line of each command, as `--help` prints them. */
export const USAGES: string[] = Object.values(COMMANDS).map((c) => c.usage);

const HELP = `Usage: npm run --silent mas -- <command> [--json]\n\nCommands:\n${USAGES.map((u) => `  ${u}`).join('\n')}\n`;

function fail(json: boolean, error: { message: string; type: string; code: string }, exitCode: number): never {
  if (json) process.stdout.write(`${JSON.stringify({ error })}\n`);
  else process.stderr.write(`error: ${error.message}\n`);
  process.exit(exitCode);
}

async function main(argv: string[], connect: Connect): Promise<void> {
  let parsed;
  try {
    parsed = parseArgs({ args: argv, allowPositionals: true, strict: true, options: OPTIONS });
  } catch (err) {
    fail(argv.includes('--json'), { message: `${(err as Error).message}\n${HELP}`, type: 'invalid_request_error', code: 'usage' }, 2);
  }
  const { values, positionals } = parsed;
  const json = values.json;
  if (values.help || positionals.length === 0) {
    process.stdout.write(HELP);
    return;
  }
  // A command is one to three words (`balance`, `key create`, `admin token create`): the longest that exists.
  const name = [3, 2, 1].map((n) => positionals.slice(0, n).join(' ')).find((words) => COMMANDS[words] !== undefined) ?? positionals.join(' ');
  const command = COMMANDS[name];
  if (!command || positionals.length > name.split(' ').length) {
    fail(json, { message: `Unknown command "${positionals.join(' ')}".\n${HELP}`, type: 'invalid_request_error', code: 'usage' }, 2);
  }

  const connection = await connect();
  if ('configError' in connection) fail(json, { message: connection.configError, type: 'invalid_request_error', code: 'invalid_configuration' }, 2);
  const { core } = connection;
  const context: CommandContext = { readCatalogFile: () => connection.readCatalogFile(), publicBaseUrl: connection.publicBaseUrl.replace(/\/+$/, '') };
  let result: unknown;
  let failure: CoreError | undefined;
  try {
    result = await command.run(core, values as unknown as Flags, context);
  } catch (err) {
    failure = toCoreError(err);
    if (!failure) throw err;
  } finally {
    await connection.close();
  }
  if (failure) {
    fail(json, publicError(failure), 1);
  }
  if (json || !command.show) process.stdout.write(`${JSON.stringify(result, null, json ? undefined : 2)}\n`);
  else process.stdout.write(`${command.show(result as never)}\n`);
}

/** Runs one command; exits non-zero on error, printing the error shape with --json. */
export function runCli(argv: string[], connect: Connect): Promise<void> {
  return main(argv, connect).catch((err: unknown) => {
    fail(argv.includes('--json'), { message: `Internal error: ${(err as Error).message ?? String(err)}`, type: 'server_error', code: 'internal_error' }, 1);
  });
}
