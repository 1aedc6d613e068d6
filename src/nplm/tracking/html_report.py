"""One self-contained HTML page for `nplm-compare --html`: the table, sortable by clicking a header,
and the plots embedded as base64 PNG. Nothing is fetched from the network, so the file opens the
same on a laptop, from a cluster login node, or attached to an e-mail."""

from __future__ import annotations

import base64
import html

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin-bottom: 1.5em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; white-space: nowrap; }
td:last-child { white-space: normal; max-width: 32em; }
th { background: #f0f0f0; cursor: pointer; user-select: none; }
th.asc::after { content: " \\25B2"; } th.desc::after { content: " \\25BC"; }
tr:nth-child(even) td { background: #fafafa; }
img { width: 540px; max-width: 100%; margin: 0 1em 1em 0; border: 1px solid #ddd; vertical-align: top; }
"""

# Click a header: sort by that column, numbers by value (the mean of "mean ± std"), blanks last;
# click again to reverse.
SCRIPT = """
document.querySelectorAll("#runs th").forEach((th, col) => th.addEventListener("click", () => {
  const body = th.closest("table").tBodies[0], asc = !th.classList.contains("asc");
  th.parentNode.querySelectorAll("th").forEach(h => h.classList.remove("asc", "desc"));
  th.classList.add(asc ? "asc" : "desc");
  const key = tr => { const t = tr.cells[col].textContent.trim(), x = parseFloat(t);
                      return t === "" ? null : (/^[-+.\\d]/.test(t) && !isNaN(x) ? x : t); };
  const rows = Array.from(body.rows).sort((a, b) => {
    const x = key(a), y = key(b);
    if (x === null || y === null) return (x === null) - (y === null);
    const c = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
    return asc ? c : -c; });
  rows.forEach(r => body.appendChild(r)); }));
"""


def html_page(title: str, header: list[str], body: list[list[str]], images: list[tuple[str, str, bytes]]) -> str:
    """The page: `header`/`body` as table#runs, each (file name, title, PNG bytes) as an <img>."""
    e = html.escape
    head = "".join(f"<th>{e(h)}</th>" for h in header)
    rows = "\n".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in body)
    figures = "\n".join(
        f'<img alt="{e(t)}" title="{e(name)}" src="data:image/png;base64,{base64.b64encode(data).decode()}">'
        for name, t, data in images)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title><style>{STYLE}</style></head>
<body>
<h1>{e(title)}</h1>
<p>{len(body)} rows; click a column header to sort. n = jobs in the row (seeds averaged: mean ± sample std).
Epoch 0 is the first epoch, as in each run's metrics.csv.</p>
<table id="runs"><thead><tr>{head}</tr></thead>
<tbody>
{rows}
</tbody></table>
{figures}
<script>{SCRIPT}</script>
</body></html>
"""
