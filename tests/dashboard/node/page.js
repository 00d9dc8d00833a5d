// Load the dashboard's page in jsdom against a running dashboard and print what it shows.
//   node page.js <base url> <hash route> [token]
// Prints {"where", "error", "rows": [[cell text, ...], ...], "scripts", "buttons"} (JSON)
// once the page rendered a table (or said there are no queues), or fails after 10 s.
const { JSDOM } = require('jsdom');

(async () => {
  const [base, route, token] = process.argv.slice(2);
  const query = token ? `?token=${encodeURIComponent(token)}` : '';
  const dom = await JSDOM.fromURL(`${base}/${query}${route}`, {
    runScripts: 'dangerously',
    resources: 'usable',
    beforeParse(window) {
      // jsdom has no fetch: lend it Node's, resolving paths against the page.
      window.fetch = (path, options) => fetch(new URL(path, base), options);
    },
  });
  const { document } = dom.window;
  const deadline = Date.now() + 10000;
  while (Date.now() < deadline) {
    const view = document.getElementById('view');
    const done = view && (view.querySelector('table') || view.textContent === 'no queues');
    const error = document.getElementById('error').textContent;
    if (done || error) {
      const rows = [...view.querySelectorAll('tr')].map(
        (tr) => [...tr.children].map((cell) => cell.textContent));
      console.log(JSON.stringify({
        where: document.getElementById('where').textContent,
        error,
        rows,
        scripts: document.querySelectorAll('script').length,
        buttons: [...view.querySelectorAll('button')].map((b) => [b.textContent, b.disabled]),
      }));
      // Exit now: the page's next refresh (a timer, a fetch in flight) would run against a
      // closed window. Writes to a pipe are synchronous on Linux: the line is out.
      process.exit(0);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error('the page rendered nothing within 10 s');
})().catch((err) => { console.error(err); process.exit(1); });
