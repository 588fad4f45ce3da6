// "Add credits": the coins the typed amount buys, as the person types (1 USD = 1000 coins, 1 cent
// = 10). The server renders the same figure for the amount it fills in: this only keeps it live.
for (const input of document.querySelectorAll('input[data-coins-for]')) {
  const output = document.getElementById(input.dataset.coinsFor);
  const update = () => {
    const match = /^(\d{1,9})(?:\.(\d{1,2}))?$/.exec(input.value.trim());
    output.textContent = match ? ((Number(match[1]) * 100 + Number((match[2] || '').padEnd(2, '0'))) * 10).toLocaleString('en-US') : '—';
  };
  input.addEventListener('input', update);
  update();
}
