// The copy buttons (a key shown once, ready requests): copies the text of the element named by data-copy.
for (const button of document.querySelectorAll('button[data-copy]')) {
  button.hidden = false;
  button.addEventListener('click', async () => {
    const text = document.getElementById(button.dataset.copy).textContent;
    await navigator.clipboard.writeText(text);
    button.textContent = 'Copied';
    // A button named by aria-label ("Copy the curl request") keeps its visible word in its name (WCAG 2.5.3).
    const label = button.getAttribute('aria-label');
    if (label) button.setAttribute('aria-label', label.replace(/^Copy\b/, 'Copied'));
  });
}
