"""The report page's HTML pieces: the stylesheet, escaping, number cells and tables."""

from __future__ import annotations

import html
from collections.abc import Sequence

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:1200px;
color:#222;padding:0 1em}h1{font-size:1.6em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;
margin-top:1.8em}table{border-collapse:collapse;margin:.6em 0;font-size:.88em}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right}th{background:#f3f3f3}
td.l,th.l{text-align:left}.bad{color:#b00020;font-weight:600}.ok{color:#1b7a1b}
img{max-width:100%;border:1px solid #eee;margin:.5em 0}pre{background:#f7f7f7;padding:1em;
overflow-x:auto;font-size:.8em}.note{color:#555;font-size:.9em}li{margin:.25em 0}
"""


def esc(x: object) -> str:
    return html.escape(str(x))


def num(x: float | None, digits: int = 4) -> str:
    return "–" if x is None else f"{x:.{digits}g}"


def table(head: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> str:
    th = "".join(f'<th class="{"l" if i < left else ""}">{esc(h)}</th>' for i, h in enumerate(head))
    body = "".join(
        "<tr>" + "".join(f'<td class="{"l" if i < left else ""}">{c}</td>'
                         for i, c in enumerate(r)) + "</tr>"
        for r in rows
    )
    return f"<table><tr>{th}</tr>{body}</table>"
