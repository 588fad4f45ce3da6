import type { AppConnectionView } from '../../../core/apps/connections.ts';
import type { AuthorizationView } from '../../../core/oauth/authorize.ts';
import { html, money, notice, page, when } from '../html.ts';

/** What the tools of the MCP server let an app do (docs/mcp.md), in the words of the consent page. */
const ABILITIES = [
  'list the models and their prices (list_models, get_model)',
  'chat with text models (chat)',
  'generate images, video, audio and 3D models, and list and follow those jobs (generate, get_generation, list_generations)',
  'upload files as inputs (upload_file)',
  "read this account's balance (get_balance)",
];

export interface ConsentValues {
  spend_cap_coins?: string;
  lifetime?: string;
  /** `personal`, or the id of an organization's wallet. */
  wallet?: string;
}

/** An organization the person belongs to, whose wallet they may let the app spend from. */
export interface ConsentWallet {
  id: string;
  name: string;
  role: string;
  /** The person's spend limit there, in coins; null: none. */
  spend_limit_coins: number | null;
}

/**
 * The consent page (docs/oauth.md, "Consent"): which app asks, where it signs in (its redirect
 * host, since a name can lie), what it will be able to do, and the person's limits on it.
 * Allow and Deny post back with the CSRF token; the page cannot be framed (frame-ancestors).
 */
export function consentPage(
  nav: { email: string; csrf: string },
  v: { authorization: AuthorizationView; balance: string; values?: ConsentValues; error?: string; replaces?: AppConnectionView | null; organizations?: ConsentWallet[] },
) {
  const { client, request } = v.authorization;
  const lifetime = v.values?.lifetime ?? '30';
  const option = (value: string, label: string) => html`<option value="${value}"${lifetime === value ? html` selected` : ''}>${label}</option>`;
  return page(
    { title: `Connect ${client.name}?`, nav: { ...nav, current: '' } },
    html`${notice('error', v.error)}
<section class="consent">
  <p><strong>${client.name}</strong> wants to use your account <strong>${nav.email}</strong> through this service's MCP server.</p>
  <p class="warning">It signs in through <strong class="redirect-host">${client.redirect_host}</strong>. Allow it only if you started this from that app.${client.kind === 'metadata_document' ? html` The app is described at <code>${client.id}</code>.` : ''}</p>
${v.replaces
    ? html`<p class="reconnect">You connected this app on ${when(v.replaces.created_at)}. Allowing again replaces that connection: its earlier sign-in stops, and the spend cap you choose here also counts the ${money(v.replaces.spent_coins)} it has spent so far.</p>`
    : ''}
  <h2>It will be able to</h2>
  <ul>${ABILITIES.map((a) => html`<li>${a}</li>`)}</ul>
  <p>and <strong>spend this account's coins</strong> on them${v.organizations && v.organizations.length > 0 ? ', or those of an organization you choose below,' : ''} as an API key does. It will not see your password or your API keys, and cannot change your account.</p>
  <form method="post" action="/authorize" class="stack">
    <input type="hidden" name="_csrf" value="${nav.csrf}">
    <input type="hidden" name="client_id" value="${request.client_id}">
    <input type="hidden" name="redirect_uri" value="${request.redirect_uri}">
    <input type="hidden" name="code_challenge" value="${request.code_challenge}">
    <input type="hidden" name="resource" value="${request.resource}">
    ${request.state !== undefined ? html`<input type="hidden" name="state" value="${request.state}">` : ''}
    ${walletChoice(v.balance, v.organizations ?? [], v.values?.wallet)}
    <label>Spend cap in coins (optional) <input type="text" name="spend_cap_coins" inputmode="decimal" maxlength="20" placeholder="No cap" value="${v.values?.spend_cap_coins ?? ''}"></label>
    <label>Access ends after
      <select name="lifetime">${option('7', '7 days')}${option('30', '30 days')}${option('90', '90 days')}${option('none', 'Never: until I disconnect it')}</select>
    </label>
    <p class="hint">You can disconnect it at any time on the <a href="/account/apps">Connected apps</a> page.</p>
    <div class="actions">
      <button type="submit" name="decision" value="allow">Allow</button>
      <button type="submit" name="decision" value="deny" class="secondary">Deny</button>
    </div>
  </form>
</section>`,
  );
}

/**
 * Which wallet the app spends from: the person's own, or an organization's they belong to (any
 * role; core checks it again). On an organization's, the person's spend limit there applies.
 */
function walletChoice(balance: string, organizations: ConsentWallet[], chosen = 'personal') {
  const radio = (value: string, label: ReturnType<typeof html>) =>
    html`<label class="check"><input type="radio" name="wallet" value="${value}"${chosen === value ? html` checked` : ''}> ${label}</label>`;
  return html`<fieldset class="wallets">
      <legend>Spend from</legend>
      ${radio('personal', html`Your own wallet (balance: ${money(Number(balance))})`)}
      ${organizations.map((o) =>
        radio(o.id, html`The organization <strong>${o.name}</strong> (you are ${o.role}${o.spend_limit_coins !== null ? html`; your limit there, ${money(o.spend_limit_coins)}, applies` : ''})`),
      )}
    </fieldset>`;
}

/** A request that cannot go back to its app (unknown client, unregistered redirect URI): an error page, never a redirect. */
export function authorizationErrorPage(message: string) {
  return page(
    { title: 'This app cannot connect' },
    html`<p class="error" role="alert">${message}</p><p>Nothing was shared with the app. Go back to it and try to connect again; if this persists, tell its developer.</p><p><a href="/account">Your account</a></p>`,
  );
}
