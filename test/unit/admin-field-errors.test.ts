import { describe, expect, it } from 'vitest';
import { actionForm, markField } from '../../adapters/web/admin/shared.ts';
import { html } from '../../adapters/web/html.ts';

/** The admin action forms show a refused field's error beside it (adapters/web/admin/shared.ts). */
describe('admin field errors', () => {
  const fields = html`<label>Coins <input type="text" name="coins" value="x"></label>
  <label>Note <input type="text" name="customer_note"></label>`;

  it('puts the message before the named input, marks it invalid and described by it, and escapes it', () => {
    const marked = markField(fields, 'coins', 'Coins: enter <an> amount.').value;
    expect(marked).toContain('<label>Coins <span class="field-error" id="coins-error">Coins: enter &lt;an&gt; amount.</span><input type="text" name="coins" aria-invalid="true" aria-describedby="coins-error" value="x"></label>');
    expect(marked).toContain('<label>Note <input type="text" name="customer_note"></label>');
  });

  it('leaves the fields as they are when none has that name', () => {
    expect(markField(fields, 'prices', 'Prices: not valid JSON.')).toBe(fields);
    expect(markField(fields, 'coins"><script', 'x').value).toBe(fields.value);
  });

  it("marks the reason's field and the confirmation box when they are the ones refused", () => {
    const form = actionForm({ action: '/admin/x', csrf: 't', understand: 'I understand.', button: 'Go', errors: { reason: 'Reason: say why, for the audit log.' } }).value;
    expect(form).toMatch(/Reason \(for the audit log\) <span class="field-error" id="reason-error">Reason: say why, for the audit log\.<\/span><input type="text" name="reason"[^>]*aria-invalid="true" aria-describedby="reason-error"/);
    expect(form).not.toContain('confirm-error');
    const unticked = actionForm({ action: '/admin/x', csrf: 't', understand: 'I understand.', button: 'Go', errors: { confirm: 'Tick “I understand” to confirm.' } }).value;
    expect(unticked).toMatch(/<span class="field-error" id="confirm-error">Tick “I understand” to confirm\.<\/span><label class="confirm"><input type="checkbox" name="confirm" value="yes" required aria-invalid="true" aria-describedby="confirm-error">/);
  });
});
