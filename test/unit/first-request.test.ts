import { describe, expect, it } from 'vitest';
import { mailFromDefault, loadEnv } from '../../config/env.ts';
import { addTopUpHint, topUpHint } from '../../core/accounts/top-up-hint.ts';
import { CoreError } from '../../core/errors.ts';
import { firstRequestModel, firstRequestSnippets } from '../../adapters/web/pages/snippets.ts';

/**
 * Issue 48's "a first request that works", the rules that need no database: the welcome credit's
 * setting and its default, the MAIL_FROM default, the 402 hint's words, and the request the keys
 * page shows after a key is created (the history's words for the credit: history-details.test.ts).
 */
describe('STARTER_CREDIT_COINS', () => {
  it('is 1000 coins with the embedded database (no DATABASE_URL), 0 beside a DATABASE_URL, and what the operator sets', () => {
    expect(loadEnv({}).STARTER_CREDIT_COINS).toBe(1000_000_000n);
    expect(loadEnv({ DATABASE_URL: 'postgres://u:p@db/mas' }).STARTER_CREDIT_COINS).toBe(0n);
    expect(loadEnv({ DATABASE_URL: 'postgres://u:p@db/mas', STARTER_CREDIT_COINS: '2.5' }).STARTER_CREDIT_COINS).toBe(2_500_000n);
    expect(loadEnv({ STARTER_CREDIT_COINS: '0' }).STARTER_CREDIT_COINS).toBe(0n);
    // Empty is unset, as shells and .env files leave it.
    expect(loadEnv({ STARTER_CREDIT_COINS: '' }).STARTER_CREDIT_COINS).toBe(1000_000_000n);
  });

  it('refuses what is not an amount of coins, naming the variable', () => {
    for (const bad of ['-5', 'ten', '1.0000001', '1e3']) {
      expect(() => loadEnv({ STARTER_CREDIT_COINS: bad }), bad).toThrow(/^Invalid configuration: STARTER_CREDIT_COINS: /);
    }
  });
});

describe('MAIL_FROM', () => {
  it("defaults to no-reply at PUBLIC_BASE_URL's host, and an operator's value wins", () => {
    expect(loadEnv({ PUBLIC_BASE_URL: 'https://api.mas.example.com/' }).MAIL_FROM).toBe('Model Access Service <no-reply@api.mas.example.com>');
    expect(loadEnv({ PUBLIC_BASE_URL: 'https://mas.example.com:8443/base' }).MAIL_FROM).toBe('Model Access Service <no-reply@mas.example.com>');
    // Unset PUBLIC_BASE_URL: http://localhost:$PORT, so localhost (a fresh machine, where mail goes to files).
    expect(loadEnv({}).MAIL_FROM).toBe('Model Access Service <no-reply@localhost>');
    expect(loadEnv({ PUBLIC_BASE_URL: 'https://mas.example.com', MAIL_FROM: 'Billing <billing@example.org>' }).MAIL_FROM).toBe('Billing <billing@example.org>');
    expect(loadEnv({ PUBLIC_BASE_URL: 'https://mas.example.com', MAIL_FROM: '  ' }).MAIL_FROM).toBe('Model Access Service <no-reply@mas.example.com>');
  });

  it('writes an IP address as an address literal', () => {
    expect(mailFromDefault('http://192.0.2.10:8080')).toBe('Model Access Service <no-reply@[192.0.2.10]>');
    expect(mailFromDefault('http://[2001:db8::1]:8080')).toBe('Model Access Service <no-reply@[IPv6:2001:db8::1]>');
  });
});

describe('the 402 hint', () => {
  const links = { addCredits: 'https://mas.example.com/account/billing#add-credits' };

  it('names the Add credits link, and tells an account on a server without payments to ask the operator', () => {
    expect(topUpHint(links, true)).toBe('Add credits at https://mas.example.com/account/billing#add-credits');
    expect(topUpHint(links, false)).toBe('Payments are not set up on this server: ask its operator for coins. Your balance: https://mas.example.com/account/billing#add-credits');
  });

  it('is added once, to insufficient_balance only; the code and reason stay', () => {
    const err = new CoreError('insufficient_balance', 'Insufficient balance: this request needs 3 coins and 1.5 are available.');
    addTopUpHint(err, links, true);
    addTopUpHint(err, links, true);
    expect(err.message).toBe('Insufficient balance: this request needs 3 coins and 1.5 are available. Add credits at https://mas.example.com/account/billing#add-credits');
    expect(err.code).toBe('insufficient_balance');
    const other = new CoreError('spend_cap_reached', "This API key's spend limit is reached.", { reason: 'key_spend_limit_reached' });
    addTopUpHint(other, links, true);
    expect(other.message).toBe("This API key's spend limit is reached.");
  });
});

describe('the first request after a key is created', () => {
  const base = 'https://mas.example.com/api/v1';
  const key = 'mas_abcdefghijklmnopqrstuvwxyz0123456789AB';
  const snippets = firstRequestSnippets(base, key, 'mas/echo');
  const code = (id: string) => snippets.find((s) => s.id === id)!.code;

  it('comes in curl, Python and JavaScript, each with the real base URL and the new key itself', () => {
    expect(snippets.map((s) => s.label)).toEqual(['curl', 'Python (openai SDK)', 'JavaScript (openai SDK)']);
    for (const s of snippets) {
      expect(s.code, s.id).toContain(key);
      expect(s.code, s.id).toContain(base);
      expect(s.code, s.id).not.toMatch(/MAS_API_KEY|\{PUBLIC_BASE_URL\}/);
    }
    expect(code('curl')).toMatch(/^curl https:\/\/mas\.example\.com\/api\/v1\/chat\/completions \\\n {2}-H "Authorization: Bearer mas_[\w]+" \\/);
    const body = JSON.parse(/-d '([\s\S]*)'$/.exec(code('curl'))![1]!) as unknown;
    expect(body).toEqual({ model: 'mas/echo', messages: [{ role: 'user', content: 'Say hello in one short sentence.' }], max_tokens: 50 });
    expect(code('python')).toContain(`client = OpenAI(\n    base_url="${base}",\n    api_key="${key}",\n)`);
    expect(code('python')).toContain('    model="mas/echo",');
    expect(code('node')).toContain(`new OpenAI({\n  baseURL: "${base}",\n  apiKey: "${key}",\n});`);
    expect(code('node')).toContain('"model": "mas/echo"');
  });

  it('uses the cheapest chat model open to every account among those the key may use', () => {
    const models = [
      { id: 'mas/image-demo', type: 'image', paid_only: false, pricing: { from: 1 } },
      { id: 'mas/echo-premium', type: 'text', paid_only: true, pricing: { input_per_million: 1, output_per_million: 1 } },
      { id: 'acme/big', type: 'text', paid_only: false, pricing: { input_per_million: 500, output_per_million: 1500 } },
      { id: 'mas/echo', type: 'text', paid_only: false, pricing: { input_per_million: 50, output_per_million: 200 } },
    ];
    expect(firstRequestModel(models, null)).toBe('mas/echo');
    expect(firstRequestModel(models, ['acme/big', 'mas/image-demo'])).toBe('acme/big');
    expect(firstRequestModel(models, ['mas/image-demo'])).toBeUndefined();
    expect(firstRequestModel([], null)).toBeUndefined();
  });
});
