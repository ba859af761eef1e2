"""What a reader of an HTML report sees, read in a real browser: Debian's headless Chromium loads the page
with a probe script appended, which writes what was laid out (the visible text, each picture's drawn
size and place) into the DOM it dumps. The tests' one way to look at a report."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WIDTH, HEIGHT = 1400, 1000  # the window: a laptop's browser

PROBE = """<script>
window.addEventListener("load", () => {
  const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.right, r.width, r.height]; };
  const seen = {
    text: document.body.innerText,
    images: [...document.images].map(i => ({natural: [i.naturalWidth, i.naturalHeight], box: box(i)})),
    svgs: [...document.querySelectorAll("svg")].map(s => ({box: box(s), marks: s.querySelectorAll("rect").length})),
    titles: [...document.querySelectorAll("svg title")].map(t => t.textContent),
    width: document.documentElement.clientWidth,
  };
  const out = document.createElement("pre");
  out.id = "probe-seen";
  out.textContent = JSON.stringify(seen);
  document.body.appendChild(out);
});
</script>"""


def seen(page: Path) -> dict:
    """Load `page` in headless Chromium: its visible text, images (decoded size, laid-out box), SVGs and
    SVG tooltips, as the browser laid them out."""
    with tempfile.TemporaryDirectory() as tmp:
        probed = Path(tmp) / "page.html"
        probed.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8")
        done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                               f"--user-data-dir={tmp}/profile", f"--window-size={WIDTH},{HEIGHT}",
                               "--virtual-time-budget=10000", "--dump-dom", probed.as_uri()],
                              capture_output=True, text=True, timeout=120)
    m = re.search(r'<pre id="probe-seen">(.*?)</pre>', done.stdout, re.S)
    assert m, f"chromium showed nothing: {done.returncode} {done.stderr[-2000:]}"
    import html

    return json.loads(html.unescape(m.group(1)))
