import { describe, expect, it } from 'vitest';
import { COINS_PER_CENT } from '../../core/payments/amounts.ts';
import { coinsText, COINS_PER_USD, exactCoinsText, formatDay, formatTime, money, moneyText, onDay, usdText, when, wrapTables } from '../../adapters/web/html.ts';

/** The pages' one way to write money and time (adapters/web/html.ts). */
describe('money on the pages', () => {
  it('takes the coin’s rate from core: 1 cent buys COINS_PER_CENT coins', () => {
    expect(COINS_PER_USD).toBe(Number(COINS_PER_CENT) * 100);
    expect(COINS_PER_USD).toBe(1000);
  });

  it('writes coins with thousands separators and the US dollars beside them, rounded to the cent', () => {
    expect(moneyText(20_000)).toBe('20,000 coins · $20.00');
    expect(moneyText(0)).toBe('0 coins · $0.00');
    expect(moneyText(1234.5)).toBe('1,234.5 coins · $1.23');
    expect(moneyText(1_234_567.891234)).toBe('1,234,567.89 coins · $1,234.57');
    expect(moneyText(12_340)).toBe('12,340 coins · $12.34');
  });

  it('says "<0.01" for an amount that is not zero but rounds to it, never "0"', () => {
    expect(coinsText(0.004213)).toBe('<0.01');
    expect(usdText(0.004213)).toBe('<$0.01');
    expect(usdText(4)).toBe('<$0.01');
    expect(usdText(5)).toBe('$0.01');
    expect(moneyText(-0.000001)).toBe('-<0.01 coins · -<$0.01');
  });

  it('signs amounts of a history when asked: + for credits, - for charges', () => {
    expect(moneyText(5000, { signed: true })).toBe('+5,000 coins · +$5.00');
    expect(moneyText(-2.5, { signed: true })).toBe('-2.5 coins · -<$0.01');
    expect(moneyText(-250, { signed: true })).toBe('-250 coins · -$0.25');
    expect(moneyText(0, { signed: true })).toBe('0 coins · $0.00');
  });

  it('keeps the exact micro-coins for a detail view or a title', () => {
    expect(exactCoinsText(1234.567891)).toBe('1,234.567891 coins');
    expect(exactCoinsText(-0.000001)).toBe('-0.000001 coins');
    expect(money(0.004213).value).toBe('<span class="fig" title="exactly 0.004213 coins">&lt;0.01 coins · &lt;$0.01</span>');
    expect(money(1234.567, { signed: true }).value).toBe('<span class="fig" title="exactly +1,234.567 coins">+1,234.57 coins · +$1.23</span>');
    // Nothing rounded away: no title.
    expect(money(20_000).value).toBe('<span class="fig">20,000 coins · $20.00</span>');
  });
});

describe('times on the pages', () => {
  it('writes every time one way, in UTC, saying so', () => {
    expect(formatTime('2026-11-27T14:03:59.999Z')).toBe('27 Nov 2026, 14:03 UTC');
    expect(formatTime('2026-01-05T00:00:00+02:00')).toBe('4 Jan 2026, 22:00 UTC');
    expect(formatTime('not a time')).toBe('not a time');
  });

  it('writes a day as "27 Nov 2026", from a day or a time', () => {
    expect(formatDay('2026-11-27')).toBe('27 Nov 2026');
    expect(formatDay('2026-12-31T23:59:59.999Z')).toBe('31 Dec 2026');
    expect(formatDay('2026-13-45')).toBe('2026-13-45');
  });

  it('marks times up with the exact ISO time, and says what to show when there is none', () => {
    expect(String(when('2026-11-27T14:03:00.000Z'))).toBe('<time datetime="2026-11-27T14:03:00.000Z" title="2026-11-27T14:03:00.000Z">27 Nov 2026, 14:03 UTC</time>');
    expect(when(null)).toBe('—');
    expect(when(undefined, 'never')).toBe('never');
    expect(onDay('2026-11-27').value).toBe('<time datetime="2026-11-27">27 Nov 2026</time>');
  });
});

describe('tables on a phone', () => {
  it('label each cell with its column, for the cards, and leave rows that span the table alone', () => {
    const out = wrapTables('<h2>Keys</h2><table><thead><tr><th>Name</th><th class="num">Spent</th></tr></thead><tbody><tr><td>laptop</td><td class="num">5</td></tr><tr><td colspan="2">more</td></tr></tbody></table>', 'Page');
    expect(out).toBe(
      '<h2>Keys</h2><div class="table-wrap" role="region" tabindex="0" aria-label="Keys"><table><thead><tr><th>Name</th><th class="num">Spent</th></tr></thead><tbody><tr><td data-label="Name">laptop</td><td class="num" data-label="Spent">5</td></tr><tr><td colspan="2">more</td></tr></tbody></table></div>',
    );
  });
});
