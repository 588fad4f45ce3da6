import { describe, expect, it } from 'vitest';
import { html, page, wrapTables } from '../../adapters/web/html.ts';

/** Tables scroll in their own box, so that no page is wider than a phone (issue 34). */
describe('wrapTables', () => {
  it('puts each table in a focusable region named after the heading above it', () => {
    const out = wrapTables('<h2>Keys &amp; apps</h2><p>x</p><table><tr><td>1</td></tr></table><h2>Usage</h2><table id="u"><tr><td>2</td></tr></table>', 'Page');
    expect(out).toBe(
      '<h2>Keys &amp; apps</h2><p>x</p><div class="table-wrap" role="region" tabindex="0" aria-label="Keys &amp; apps"><table><tr><td>1</td></tr></table></div>' +
        '<h2>Usage</h2><div class="table-wrap" role="region" tabindex="0" aria-label="Usage"><table id="u"><tr><td>2</td></tr></table></div>',
    );
  });

  it('names a table with no heading above it after the page, and leaves a table already in a box alone', () => {
    expect(wrapTables('<table></table>', 'API keys')).toBe('<div class="table-wrap" role="region" tabindex="0" aria-label="API keys"><table></table></div>');
    const boxed = '<div class="table-wrap" role="region" tabindex="0" aria-label="Mine">\n<table></table></div>';
    expect(wrapTables(boxed, 'Page')).toBe(boxed);
  });

  it('a value that looks like a table is text, escaped before it gets here', () => {
    const out = page({ title: 'T' }, html`<p>${'<table>'}</p><h2><span>Jobs</span></h2><table></table>`);
    expect(out).toContain('<p>&lt;table&gt;</p>');
    expect(out).toContain('aria-label="Jobs"><table></table></div>');
    expect(out.match(/table-wrap/g)).toHaveLength(1);
  });
});
