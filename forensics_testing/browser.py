"""Headless Chromium for the report tests: what a page looks like at a laptop's viewport.

No browser driver is installed (no playwright, no selenium), so the measuring is done by the page
itself: `probe` writes a COPY of the page with the Content-Security-Policy removed and a script
appended that measures the elements after layout and writes the result as JSON into the DOM;
`chromium --dump-dom` prints that DOM. `screenshot` renders the page as it ships (CSP and all).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium")
VIEWPORT = (1280, 800)  # a typical laptop's browser window
_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
          "--disable-background-networking", "--disable-component-update",
          "--disable-sync"]  # fmt: skip

# Runs after the page's own content. Measures the first screen (the headline, the labelled
# lines, the commands in their box), every whole-flag block (`startsAt`: where its first
# character is drawn, relative to the block's left edge: negative when scrolled or indented out
# of sight; `broken`: space-separated words drawn across two lines; `copied`: what selecting the
# element and copying gives), and anything unselectable; then opens every folded <details> (the
# drill-down) so the rendered text covers the whole page.
PROBE_JS = r"""
(() => {
  const style = (el) => getComputedStyle(el);
  const box = (el) => { const r = el.getBoundingClientRect();
    return {top: r.top + scrollY, bottom: r.bottom + scrollY, left: r.left, right: r.right}; };
  const lineTops = (el) => { const range = document.createRange(); range.selectNodeContents(el);
    return [...new Set([...range.getClientRects()].map(r => Math.round(r.top)))].length; };
  const startsAt = (el) => { const t = document.createTreeWalker(el, NodeFilter.SHOW_TEXT)
      .nextNode(); if (!t || !t.length) return null; const range = document.createRange();
    range.setStart(t, 0); range.setEnd(t, 1);
    return range.getBoundingClientRect().left - el.getBoundingClientRect().left; };
  const broken = (el) => { const t = document.createTreeWalker(el, NodeFilter.SHOW_TEXT)
      .nextNode(); if (!t) return []; const out = []; const re = /\S+/g; let m;
    while ((m = re.exec(t.data)) !== null) { const range = document.createRange();
      range.setStart(t, m.index); range.setEnd(t, m.index + m[0].length);
      const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
      if (tops.size > 1 && m[0].length < 60) out.push(m[0]); }
    return out; };
  const copied = (el) => { const sel = getSelection(); sel.removeAllRanges();
    const range = document.createRange(); range.selectNodeContents(el); sel.addRange(range);
    const text = sel.toString(); sel.removeAllRanges(); return text; };
  const one = (el) => el && {text: el.textContent, box: box(el), lines: lineTops(el),
    startsAt: startsAt(el), broken: broken(el), copied: copied(el),
    whiteSpace: style(el).whiteSpace, userSelect: style(el).userSelect,
    wordBreak: style(el).wordBreak, overflowWrap: style(el).overflowWrap,
    overflowX: style(el).overflowX, scrollWidth: el.scrollWidth, clientWidth: el.clientWidth};
  const out = {viewport: [innerWidth, innerHeight],
    headline: one(document.querySelector('p.headline')),
    commands: [...document.querySelectorAll('div.box code.cmd')].map(one),
    stopgap: one(document.querySelector('div.stopgap code.cmd')),
    labels: Object.fromEntries([...document.querySelectorAll('div.first [data-label]')]
      .map(el => [el.dataset.label, one(el)])),
    flags: [...document.querySelectorAll('pre.flags')].map(one),
    unselectable: [...document.querySelectorAll('body *')]
      .filter(el => style(el).userSelect === 'none').map(el => el.tagName),
    headings: [...document.querySelectorAll('h2')].map(h => h.textContent),
    counts: (document.querySelector('[data-label="clusters"]') || {}).textContent,
    drilldown: document.querySelectorAll('details.drill').length};
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  out.text = document.body.innerText;
  const probe = document.createElement('pre');
  probe.id = 'forensics-probe';
  probe.textContent = JSON.stringify(out);
  document.body.appendChild(probe);
})();
"""
_CSP = re.compile(r'<meta http-equiv="Content-Security-Policy"[^>]*>')


def _run(
    args: list[str], profile: Path, size: tuple[int, int] = VIEWPORT
) -> subprocess.CompletedProcess[str]:
    cmd = [CHROMIUM or "chromium", *_FLAGS, f"--user-data-dir={profile}",
           f"--window-size={size[0]},{size[1]}", *args]  # fmt: skip
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120)


def probe(page: Path, work: Path) -> dict[str, Any]:
    """Lay `page` out at VIEWPORT and return the measurements of PROBE_JS (positions in page
    pixels from the top of the document)."""
    html = page.read_text()
    copy = work / f"probe-{page.stem}.html"
    copy.write_text(_CSP.sub("", html).replace("</body>", f"<script>{PROBE_JS}</script></body>"))
    dom = _run(["--dump-dom", copy.resolve().as_uri()], work / "profile").stdout
    found = re.search(r'<pre id="forensics-probe">(.*?)</pre>', dom, re.S)
    assert found, f"the probe did not run: {dom[-2000:]}"
    import html as html_lib

    return json.loads(html_lib.unescape(found.group(1)))


def screenshot(page: Path, shot: Path, height: int = VIEWPORT[1]) -> Path:
    """The page as it ships, `height` pixels of it, as PNG."""
    _run([f"--screenshot={shot}", page.resolve().as_uri()], shot.parent / "profile-shot",
         (VIEWPORT[0], height))  # fmt: skip
    return shot
