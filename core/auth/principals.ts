import { CoreError } from '../errors.ts';

/**
 * Who is calling, once their credential has been checked. Every procedure of the core router
 * takes one of these from its base procedure (core/trpc.ts), and every ownership check takes
 * the principal's account: an object of another account is as unknown as a missing one.
 */

/** An API key: spends its account's coins, limited per key (SPEC part 8). */
export interface KeyPrincipal {
  kind: 'api_key';
  accountId: string;
  keyId: string;
  paid: boolean;
  /**
   * Found in the cache of recent look-ups, not in the database just now: the key may have been
   * revoked since. Only a caller that checks the key again where it spends may accept this
   * (the chat reservation does, in the same statement; see `chatProcedure`).
   */
  fromCache: boolean;
  /** The models this key may use (core/keys/limits.ts); absent: all. */
  allowedModels?: readonly string[];
}

/**
 * An app connected through OAuth (docs/oauth.md): its access token maps to an app connection,
 * which spends like a key, through the app's own key, within its own spend cap and expiry.
 */
export interface AppConnectionPrincipal {
  kind: 'app_connection';
  accountId: string;
  connectionId: string;
  keyId: string;
  paid: boolean;
  fromCache: false;
  spendCapMicro: bigint | null;
  expiresAt: Date | null;
}

/**
 * A management key (docs/organizations.md): manages keys and organizations, never calls models.
 * `personId` is the person it acts as (with their role); `organizationId`, when set, is the one
 * organization it may act on (a key made with `organization_id`); null: the person's own keys
 * and every organization they belong to.
 */
export interface ManagementPrincipal {
  kind: 'management';
  /** The wallet the key belongs to: the person's account, or the organization's. */
  accountId: string;
  keyId: string;
  personId: string;
  organizationId: string | null;
}

/**
 * A person managing keys and organizations: signed in to the pages (every organization they
 * belong to), or through a management key (`organizationId`: the only organization it may act
 * on, when it was made for one). Roles are checked in core/organizations/roles.ts.
 */
export interface Actor {
  personId: string;
  organizationId: string | null;
  /** The management key acting, for the audit trail; absent: the person in the pages. */
  keyId?: string;
}

/** A person signed in to the account pages. */
export interface SessionPrincipal {
  kind: 'session';
  accountId: string;
  sessionId: string;
}

/** An operator of the admin API: `viewer` reads, `operator` also acts (and is audited). */
export interface AdminPrincipal {
  kind: 'admin';
  /** `adm_…` for an admin token, `adu_…` for an admin user signed in to the admin pages. */
  adminId: string;
  role: 'viewer' | 'operator';
  /** An admin token (scripts, dashboards), or an admin user's session (the admin pages). */
  via: 'token' | 'session';
}

/** The service itself: Temporal activities and the CLI on the server's machine. */
export interface InternalPrincipal {
  kind: 'internal';
}

/** Whoever may spend an account's coins on models. */
export type SpendingPrincipal = KeyPrincipal | AppConnectionPrincipal;

/**
 * Refuses a model the caller's key may not use. Called once where a request's model is resolved
 * (chat and responses in core/chat/chat.ts, media jobs in core/generations/create-generation.ts),
 * so every transport (REST, MCP) refuses alike.
 */
export function requireModelAllowed(principal: SpendingPrincipal, modelId: string): void {
  if (principal.kind !== 'api_key' || !principal.allowedModels || principal.allowedModels.includes(modelId)) return;
  throw new CoreError('forbidden', `This API key may not use the model '${modelId}'. It may use: ${principal.allowedModels.join(', ')}. The account owner can change the key's models on the API keys page.`, {
    reason: 'model_not_allowed',
    param: 'model',
  });
}

export type Principal = SpendingPrincipal | ManagementPrincipal | SessionPrincipal | AdminPrincipal | InternalPrincipal;

/**
 * What an adapter hands core about the caller, unchecked. Core decides what it proves.
 * - `bearer`: `Authorization: Bearer …`: an API key, or an app's OAuth access token. `resource`
 *   is the URL of the protected resource the adapter serves (the MCP server): an access token
 *   is accepted only by the resource it was issued for (its audience, RFC 8707); an adapter
 *   that names none (REST) accepts keys only.
 * - `session`: the account pages' session cookie
 * - `admin`: an admin API token
 * - `internal`: an in-process caller with no network in between (workflow activities, CLI)
 */
export type Credential =
  | { kind: 'bearer'; token: string | null; resource?: string | undefined }
  | { kind: 'session'; token: string | null }
  | { kind: 'admin'; token: string | null }
  | { kind: 'internal' }
  | { kind: 'none' };
