import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CookieBrowser, csrfOf, signUpPerson, type Person } from '../support/cookie-browser.ts';
import { openTestOrm } from '../support/db.ts';
import { startTestApi } from '../support/http.ts';
import { testMailbox } from '../support/mail.ts';
import { createKey } from '../../core/keys/keys.ts';

/**
 * The organizations pages (adapters/web/pages/organizations.ts, invitation.ts) over real HTTP
 * with cookies: every form posts with its CSRF token and is refused without it; core's refusals
 * come back on the page (a field's beside it, a role's as a notice, 403); the invitation link's
 * page answers 410 and 403 saying why; the wallet switch is checked against the person's
 * organizations on every page.
 */
let orm: MikroORM;
let api: Awaited<ReturnType<typeof startTestApi>>;
beforeAll(async () => {
  orm = await openTestOrm();
  api = await startTestApi(orm);
});
afterAll(async () => {
  await api?.close();
  await orm?.close();
});

const text = (page: string) => page.replace(/<[^>]+>/g, '').replace(/\s+/g, ' ');
const db = () => orm.em.fork();

/** Opens `path`, then posts `fields` with the CSRF token of that page's forms. */
async function submit(person: { browser: CookieBrowser }, path: string, action: string, fields: Record<string, string> = {}) {
  const csrf = csrfOf(await (await person.browser.fetch(path)).text())!;
  return person.browser.post(action, { _csrf: csrf, ...fields });
}

async function createOrganization(owner: Person, name: string): Promise<string> {
  const res = await submit(owner, '/account/organizations', '/account/organizations', { name });
  expect(res.status).toBe(303);
  const id = /\/account\/organizations\/(org_\w+)\?created=1$/.exec(res.headers.get('location')!)?.[1];
  expect(id).toBeDefined();
  return id!;
}

/** Invites `email` through the form; the link mailed to it. */
async function invite(owner: Person, org: string, email: string, role = 'member'): Promise<string> {
  const before = testMailbox.to(email).length;
  const res = await submit(owner, `/account/organizations/${org}`, `/account/organizations/${org}/invitations`, { email, role });
  expect(res.status).toBe(303);
  const mail = await testMailbox.next(email, before);
  expect(mail.subject).toMatch(/invited/);
  return new URL(mail.link!).pathname;
}

async function join(person: Person, link: string) {
  const page = await person.browser.fetch(link);
  expect(page.status).toBe(200);
  const res = await person.browser.post(`${link}/accept`, { _csrf: csrfOf(await page.text())! });
  expect(res.status).toBe(303);
  return res;
}

describe('creating an organization and inviting', () => {
  it('creates one with the form; a missing name is refused beside the field; no CSRF token: 403 and nothing made', async () => {
    const owner = await signUpPerson(api.url, orm, 'orgp-create');
    const empty = await owner.browser.fetch('/account/organizations');
    expect(empty.status).toBe(200);
    expect(text(await empty.text())).toContain('You belong to no organization yet.');

    const noCsrf = await owner.browser.post('/account/organizations', { name: 'Acme' });
    expect(noCsrf.status).toBe(403);
    const blank = await submit(owner, '/account/organizations', '/account/organizations', { name: '  ' });
    expect(blank.status).toBe(400);
    const body = await blank.text();
    expect(body).toMatch(/id="org-name-error"/);
    expect(body).toMatch(/aria-invalid="true" aria-describedby="org-name-error"/);
    const [members] = await db().execute<{ n: string }[]>(`select count(*)::text as n from organization_members where account_id = ?`, [owner.accountId]);
    expect(members!.n).toBe('0');

    const org = await createOrganization(owner, 'Acme <Research>');
    const page = await owner.browser.fetch(`/account/organizations/${org}?created=1`);
    expect(page.status).toBe(200);
    const html = await page.text();
    expect(html).toContain('Acme &lt;Research&gt;');
    expect(text(html)).toContain('Your role: Owner');
    expect(text(html)).toContain(owner.email);
    expect(html).toContain(`href="/account/billing?organization=${org}"`);
    const list = text(await (await owner.browser.fetch('/account/organizations')).text());
    expect(list).toContain('Acme &lt;Research&gt;');
  });

  it('invites by e-mail: a bad address is refused beside the field; the link page shows who invites; revoking makes it 410', async () => {
    const owner = await signUpPerson(api.url, orm, 'orgp-inv-owner');
    const org = await createOrganization(owner, 'Invites Inc');
    const bad = await submit(owner, `/account/organizations/${org}`, `/account/organizations/${org}/invitations`, { email: 'not an address', role: 'member' });
    expect(bad.status).toBe(400);
    expect(await bad.text()).toMatch(/id="invite-email-error"/);
    const noCsrf = await owner.browser.post(`/account/organizations/${org}/invitations`, { email: 'x@example.test', role: 'member' });
    expect(noCsrf.status).toBe(403);

    const invited = `orgp-invited-${Date.now()}@example.test`;
    const link = await invite(owner, org, invited, 'admin');
    expect(link).toMatch(/^\/invitations\/mas_invite_/);

    // Signed out: the organization, the inviter, the role, and ways in that come back here.
    const stranger = new CookieBrowser(api.url);
    const shown = await stranger.fetch(link);
    expect(shown.status).toBe(200);
    const page = text(await shown.text());
    expect(page).toContain(`${owner.email} invites ${invited} to join the organization Invites Inc as an admin`);
    expect(page).toContain('Sign in to accept');
    expect(stranger.cookie('mas_invitation')).toBeDefined();

    const listed = text(await (await owner.browser.fetch(`/account/organizations/${org}`)).text());
    expect(listed).toContain(invited);
    const [row] = await db().execute<{ id: string }[]>('select id from organization_invitations where organization_id = ? and email = ?', [org, invited]);
    const revoked = await submit(owner, `/account/organizations/${org}`, `/account/organizations/${org}/invitations/${row!.id}/revoke`);
    expect(revoked.status).toBe(303);
    const gone = await stranger.fetch(link);
    expect(gone.status).toBe(410);
    expect(text(await gone.text())).toContain('was revoked by the organization');
    const unknown = await stranger.fetch('/invitations/mas_invite_nothing');
    expect(unknown.status).toBe(404);
  });
});

describe('accepting, roles and limits', () => {
  let owner: Person;
  let member: Person;
  let other: Person;
  let org = '';
  let link = '';
  beforeAll(async () => {
    owner = await signUpPerson(api.url, orm, 'orgp-owner');
    member = await signUpPerson(api.url, orm, 'orgp-member');
    other = await signUpPerson(api.url, orm, 'orgp-other');
    org = await createOrganization(owner, 'Team Wallet');
    link = await invite(owner, org, member.email);
  });

  it('another address gets 403 naming the address it is for; the invited one accepts with CSRF, once (then 410)', async () => {
    const wrong = await other.browser.fetch(link);
    expect(wrong.status).toBe(403);
    expect(text(await wrong.text())).toContain(`This invitation is for ${member.email}`);

    const page = await member.browser.fetch(link);
    expect(page.status).toBe(200);
    const html = await page.text();
    expect(text(html)).toContain('Accept and join Team Wallet');
    const noCsrf = await member.browser.post(`${link}/accept`, {});
    expect(noCsrf.status).toBe(403);
    const accepted = await member.browser.post(`${link}/accept`, { _csrf: csrfOf(html)! });
    expect(accepted.status).toBe(303);
    expect(accepted.headers.get('location')).toBe(`/account/organizations/${org}?joined=1`);
    const [m] = await db().execute<{ role: string }[]>('select role from organization_members where organization_id = ? and account_id = ?', [org, member.accountId]);
    expect(m!.role).toBe('member');

    const again = await member.browser.fetch(link);
    expect(again.status).toBe(410);
    expect(text(await again.text())).toContain('has been used already');
  });

  it('a member sees the organization and their own limit, not the admin forms; admin actions are refused with a 403 notice', async () => {
    const page = await member.browser.fetch(`/account/organizations/${org}`);
    expect(page.status).toBe(200);
    const html = await page.text();
    expect(text(html)).toContain('Your role: Member');
    expect(html).not.toContain('Send invitation');
    expect(html).toContain('Leave Team Wallet');

    const refused = await submit(member, `/account/organizations/${org}`, `/account/organizations/${org}/invitations`, { email: 'z@example.test', role: 'member' });
    expect(refused.status).toBe(403);
    expect(text(await refused.text())).toContain('This needs the admin role');
    const memberPage = await member.browser.fetch(`/account/organizations/${org}/members/${owner.accountId}`);
    expect(memberPage.status).toBe(403);
    expect(await memberPage.text()).toMatch(/role="alert">This needs the admin role/);
    const update = await submit(member, `/account/organizations/${org}`, `/account/organizations/${org}/members/${member.accountId}`, { role: 'admin', spend_limit_coins: '', spend_limit_period: 'monthly' });
    expect(update.status).toBe(403);

    // A non-member: the organization is unknown (404), as one that does not exist.
    expect((await other.browser.fetch(`/account/organizations/${org}`)).status).toBe(404);
    expect((await other.browser.fetch(`/account/organizations/${org}/usage`)).status).toBe(404);
  });

  it('the owner sets the member’s limit: a bad amount is refused beside the field; the list shows limit and spend', async () => {
    const path = `/account/organizations/${org}/members/${member.accountId}`;
    const form = await owner.browser.fetch(path);
    expect(form.status).toBe(200);
    const bad = await submit(owner, path, path, { role: 'member', spend_limit_coins: 'lots', spend_limit_period: 'monthly' });
    expect(bad.status).toBe(400);
    const badHtml = await bad.text();
    expect(badHtml).toMatch(/id="member-limit-error"/);
    expect(badHtml).toContain('value="lots"');
    const noCsrf = await owner.browser.post(path, { role: 'member', spend_limit_coins: '5', spend_limit_period: 'monthly' });
    expect(noCsrf.status).toBe(403);
    const saved = await submit(owner, path, path, { role: 'member', spend_limit_coins: '5', spend_limit_period: 'monthly' });
    expect(saved.status).toBe(303);
    const [m] = await db().execute<{ spend_limit_micro: string; spend_limit_period: string }[]>(
      'select spend_limit_micro::text, spend_limit_period from organization_members where organization_id = ? and account_id = ?',
      [org, member.accountId],
    );
    expect(m).toEqual({ spend_limit_micro: '5000000', spend_limit_period: 'monthly' });
    const list = text(await (await owner.browser.fetch(`/account/organizations/${org}`)).text());
    expect(list).toContain('0 coins · $0.00 of 5 coins this month');
    const own = text(await (await member.browser.fetch(`/account/organizations/${org}`)).text());
    expect(own).toContain('Your spend from this organization\'s wallet: 0 coins · $0.00 of 5 coins this month');

    // The last owner stays: lowering them is refused with a notice (409).
    const ownerPath = `/account/organizations/${org}/members/${owner.accountId}`;
    const last = await submit(owner, ownerPath, ownerPath, { role: 'admin', spend_limit_coins: '', spend_limit_period: 'monthly' });
    expect(last.status).toBe(409);
    expect(await last.text()).toMatch(/role="alert">An organization always has an owner/);
  });

  it('the wallet switch: the keys page makes keys of the organization’s wallet; a forged choice falls back to the personal wallet', async () => {
    const switched = await submit(member, '/account/keys', '/account/wallet', { organization: org, next: '/account/keys' });
    expect(switched.status).toBe(303);
    expect(switched.headers.get('location')).toBe('/account/keys');
    const keysPage = await (await member.browser.fetch('/account/keys')).text();
    expect(keysPage).toContain('API keys of Team Wallet');
    expect(keysPage).toContain(`href="/account/billing?organization=${org}"`);
    const created = await member.browser.post('/account/keys', { _csrf: csrfOf(keysPage)!, name: 'team laptop' });
    expect(created.status).toBe(303);
    const [key] = await db().execute<{ id: string; account_id: string; member_id: string }[]>('select id, account_id, member_id from api_keys where name = ? and member_id = ?', ['team laptop', member.accountId]);
    expect(key).toMatchObject({ account_id: org, member_id: member.accountId });
    const overview = text(await (await member.browser.fetch('/account')).text());
    expect(overview).toContain('Overview of Team Wallet');

    // The owner (an admin) sees the member's key on the organization's keys page; a revoke page works by id.
    await submit(owner, '/account/keys', '/account/wallet', { organization: org, next: '/account/keys' });
    const ownerKeys = text(await (await owner.browser.fetch('/account/keys')).text());
    expect(ownerKeys).toContain('team laptop');
    expect((await owner.browser.fetch(`/account/keys/${key!.id}/revoke`)).status).toBe(200);

    // Usage: the organization's spend per member and per key; a member sees only their own.
    await db().execute(
      `insert into completion_records (id, kind, account_id, key_id, model, prompt_tokens, completion_tokens, cost_micro, created_at, duration_ms) values (?, 'chat.completion', ?, ?, 'test/ok', 10, 20, 1500000, now(), 5)`,
      [`chatcmpl-orgp-${Date.now()}`, org, key!.id],
    );
    const usage = text(await (await owner.browser.fetch(`/account/organizations/${org}/usage`)).text());
    expect(usage).toContain(member.email);
    expect(usage).toContain('1.5 coins · &lt;$0.01');
    // The owner's own key spends too: the owner sees both members; the member only themself, in the page and in the CSV.
    const ownerKey = await createKey(db(), org, { name: 'owner server' }, undefined, { memberId: owner.accountId });
    await db().execute(
      `insert into completion_records (id, kind, account_id, key_id, model, prompt_tokens, completion_tokens, cost_micro, created_at, duration_ms) values (?, 'chat.completion', ?, ?, 'test/ok', 1, 2, 700000, now(), 5)`,
      [`chatcmpl-orgp-owner-${Date.now()}`, org, ownerKey.id],
    );
    const both = text(await (await owner.browser.fetch(`/account/organizations/${org}/usage`)).text());
    expect(both).toContain(owner.email);
    expect(both).toContain('owner server');
    const viaWallet = text(await (await member.browser.fetch('/account/usage')).text());
    expect(viaWallet).toContain('Usage of Team Wallet');
    expect(viaWallet).toContain('Your own use');
    expect(viaWallet).toContain('team laptop');
    expect(viaWallet).not.toContain('owner server');
    const memberCsv = await (await member.browser.fetch(`/account/organizations/${org}/usage.csv`)).text();
    expect(memberCsv).toContain('team laptop');
    expect(memberCsv).not.toContain('owner server');
    const csv = await owner.browser.fetch(`/account/organizations/${org}/usage.csv`);
    expect(csv.status).toBe(200);
    expect(csv.headers.get('content-type')).toMatch(/text\/csv/);
    const lines = (await csv.text()).trim().split('\r\n');
    expect(lines[0]).toBe('day,user_id,email,key_id,key_name,key_prefix,model,requests,spent_coins,input_tokens,output_tokens');
    expect(lines.slice(1).some((l) => l.includes(`${member.accountId},${member.email},${key!.id},team laptop`))).toBe(true);
    const badRange = await owner.browser.fetch(`/account/organizations/${org}/usage?from=2026-02-30&to=2026-03-01`);
    expect(badRange.status).toBe(400);

    // Someone else's organization through the switch: refused; through a forged cookie: the personal wallet.
    expect((await submit(other, '/account/keys', '/account/wallet', { organization: org, next: '/account/keys' })).status).toBe(404);
    const forged = await fetch(`${api.url}/account/keys`, { headers: { cookie: `mas_session=${other.session}; mas_wallet=${org}` } });
    expect(forged.status).toBe(200);
    const forgedPage = await forged.text();
    expect(forgedPage).not.toContain('Team Wallet');
    expect(forged.headers.getSetCookie().some((c) => c.startsWith('mas_wallet=;'))).toBe(true);
    expect((await fetch(`${api.url}/account/keys?organization=${org}`, { headers: { cookie: `mas_session=${other.session}` } }).then((r) => r.text()))).not.toContain('Team Wallet');

    // Back to the personal wallet.
    const personal = await submit(member, '/account/keys', '/account/wallet', { organization: '', next: '/account/keys' });
    expect(personal.status).toBe(303);
    expect(await (await member.browser.fetch('/account/keys')).text()).not.toContain('API keys of Team Wallet');
  });

  it('removing a member revokes their keys; a member leaves; the last owner cannot leave', async () => {
    const third = await signUpPerson(api.url, orm, 'orgp-third');
    await join(third, await invite(owner, org, third.email));
    const removed = await submit(owner, `/account/organizations/${org}/members/${third.accountId}`, `/account/organizations/${org}/members/${third.accountId}/remove`);
    expect(removed.status).toBe(303);
    expect((await third.browser.fetch(`/account/organizations/${org}`)).status).toBe(404);

    const left = await submit(member, `/account/organizations/${org}`, `/account/organizations/${org}/leave`);
    expect(left.status).toBe(303);
    expect(left.headers.get('location')).toBe('/account/organizations?left=1');
    const [live] = await db().execute<{ n: string }[]>('select count(*)::text as n from api_keys where account_id = ? and member_id = ? and revoked_at is null', [org, member.accountId]);
    expect(live!.n).toBe('0');

    const stays = await submit(owner, `/account/organizations/${org}`, `/account/organizations/${org}/leave`);
    expect(stays.status).toBe(409);
    expect(await stays.text()).toMatch(/role="alert">An organization always has an owner/);
  });
});

describe('management keys on the keys page', () => {
  it('the box makes a management key, marked in the list; a forged wallet in the query is the personal wallet', async () => {
    const person = await signUpPerson(api.url, orm, 'orgp-mgmt');
    const res = await submit(person, '/account/keys', '/account/keys', { name: 'provisioner', management: 'on' });
    expect(res.status).toBe(303);
    const [key] = await db().execute<{ kind: string; member_id: string | null }[]>('select kind, member_id from api_keys where account_id = ? and name = ?', [person.accountId, 'provisioner']);
    expect(key).toEqual({ kind: 'management', member_id: null });
    const page = text(await (await person.browser.fetch('/account/keys?organization=org_doesnotexist')).text());
    expect(page).toContain('provisioner (management)');
    expect(page).toContain('1 of 10 keys in use.');
    expect(page).not.toContain('API keys of');
    // A management key calls no model: no chat to try it with.
    expect(page).not.toContain('Try the key');
  });
});

describe('signing up from an invitation', () => {
  it('comes back to the invitation once the new account is confirmed', async () => {
    const owner = await signUpPerson(api.url, orm, 'orgp-su-owner');
    const org = await createOrganization(owner, 'Newcomers');
    const email = `orgp-newcomer-${Date.now()}@example.test`;
    const link = await invite(owner, org, email);
    const browser = new CookieBrowser(api.url);
    expect((await browser.fetch(link)).status).toBe(200);
    const csrf = csrfOf(await (await browser.fetch('/signup')).text())!;
    expect((await browser.post('/signup', { _csrf: csrf, email, password: 'a long enough password' })).status).toBe(303);
    const token = testMailbox.tokenFor(email, 'verify');
    const verify = await browser.fetch(`/signup/verify?${new URLSearchParams({ token }).toString()}`);
    const verified = await browser.post('/signup/verify', { _csrf: csrfOf(await verify.text())!, token });
    expect(verified.headers.get('location')).toBe('/account?verified=1');
    const back = await browser.fetch('/account?verified=1');
    expect(back.status).toBe(303);
    expect(back.headers.get('location')).toBe(link);
    const page = await browser.fetch(link);
    expect(text(await page.text())).toContain('Accept and join Newcomers');
  });
});

describe('a hostile browser', () => {
  it('malformed and oversized ids, tokens and fields get a 4xx page, never a 500, and change nothing', async () => {
    const owner = await signUpPerson(api.url, orm, 'org-hostile');
    const org = await createOrganization(owner, 'Hostile');
    const long = 'x'.repeat(20_000);
    for (const path of [
      '/account/organizations/nope',
      `/account/organizations/org_${long}`,
      '/account/organizations/org_doesNotExist1',
      `/account/organizations/${org}/members/acct_%00`,
      `/account/organizations/${org}/members/${long}`,
      `/account/organizations/${org}/usage?from=${long}&to=2026-13-45`,
      `/invitations/${long}`,
      '/invitations/mas_invite_%00%ff',
      '/account/keys?organization=org_%27%3B--',
    ]) {
      const res = await owner.browser.fetch(path);
      expect(res.status, path).toBeGreaterThanOrEqual(200);
      expect(res.status, path).toBeLessThan(500);
    }
    const before = await db().execute('select count(*)::int as n from organization_members where organization_id = ?', [org]);
    for (const [action, fields] of [
      [`/account/organizations/${org}/invitations`, { email: `${long}@example.test`, role: 'owner' }],
      [`/account/organizations/${org}/invitations`, { email: 'a@example.test', role: 'superuser' }],
      [`/account/organizations/${org}/members/${owner.accountId}`, { role: 'member', spend_limit_coins: '1e400', spend_limit_period: 'yearly' }],
      ['/account/organizations', { name: long }],
      ['/account/wallet', { organization: long, next: 'https://evil.example/' }],
    ] as [string, Record<string, string>][]) {
      const res = await submit(owner, `/account/organizations/${org}`, action, fields);
      expect(res.status, action).toBeLessThan(500);
      if (res.status === 303) expect(res.headers.get('location'), action).toMatch(/^\//);
    }
    expect(await db().execute('select count(*)::int as n from organization_members where organization_id = ?', [org])).toEqual(before);
    expect(await db().execute(`select count(*)::int as n from organization_invitations where organization_id = ?`, [org])).toEqual([{ n: 0 }]);
    expect((await db().execute<{ name: string }[]>(`select name from accounts where kind = 'organization' and email = ?`, [owner.email])).map((r) => r.name)).toEqual(['Hostile']);
  });
});
