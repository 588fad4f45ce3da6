// A page waiting for something to land (a payment's credit): every few seconds it asks for itself
// again and, once the answer no longer waits, shows it in place. Its status region announces the
// change. With no script, the page's "Refresh now" link does the same by hand. Gives up after
// five minutes, as Stripe's webhook is there within seconds or is late for reasons the page cannot fix.
const waiting = document.querySelector('main[data-poll-seconds]');
if (waiting) {
  const every = Math.max(1, Number(waiting.dataset.pollSeconds)) * 1000;
  const until = Date.now() + 5 * 60 * 1000;
  const check = async () => {
    try {
      const res = await fetch(location.href, { headers: { accept: 'text/html' }, cache: 'no-store', credentials: 'same-origin' });
      if (res.ok) {
        const next = new DOMParser().parseFromString(await res.text(), 'text/html');
        const main = next.querySelector('main');
        if (main && !main.hasAttribute('data-poll-seconds')) {
          waiting.replaceChildren(...main.childNodes);
          waiting.removeAttribute('data-poll-seconds');
          document.title = next.title;
          return;
        }
      }
    } catch {
      // The network blinked: try again at the next turn.
    }
    if (Date.now() < until) setTimeout(check, every);
  };
  setTimeout(check, every);
}
