// The copy button of a key shown once: copies the text of the element named by data-copy.
for (const button of document.querySelectorAll('button[data-copy]')) {
  button.hidden = false;
  button.addEventListener('click', async () => {
    const text = document.getElementById(button.dataset.copy).textContent;
    await navigator.clipboard.writeText(text);
    button.textContent = 'Copied';
  });
}
