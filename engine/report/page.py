"""The report's HTML page: self-contained, opens offline.

Owns the page's layout: a title naming the sessions, the notes of cut logs, the summary table, then
every figure as an ``<img>`` whose ``src`` is a ``data:image/png;base64`` URI of the same PNG written
beside it. No script, no stylesheet or font from elsewhere: the page needs no network.
"""
from __future__ import annotations

import base64
from html import escape

STYLE = ("body{font-family:sans-serif;margin:1.5em;max-width:1400px}table{border-collapse:collapse}"
         "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}td:first-child,th:first-child"
         "{text-align:left}img{max-width:100%;display:block;margin:1em 0}.note{color:#a33}")


def render_page(title: str, labels: list[str], notes: list[str], rows: list[tuple[str, list[str]]],
                figures: list[tuple[str, str, bytes]]) -> str:
    """``figures``: (name, caption, PNG bytes) in page order."""
    parts = ["<!DOCTYPE html>", "<html lang=\"en\"><head><meta charset=\"utf-8\">",
             f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>",
             f"<h1>{escape(title)}</h1>"]
    parts += [f"<p class=\"note\">{escape(n)}</p>" for n in notes]
    parts.append("<h2>Summary</h2><table id=\"summary\"><thead><tr><th></th>"
                 + "".join(f"<th>{escape(label)}</th>" for label in labels) + "</tr></thead><tbody>")
    parts += ["<tr><td>" + escape(name) + "</td>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>"
              for name, cells in rows]
    parts.append("</tbody></table>")
    for name, caption, png in figures:
        uri = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
        parts.append(f"<h2 id=\"{escape(name)}\">{escape(caption)}</h2>"
                     f"<img src=\"{uri}\" alt=\"{escape(caption)}\" data-view=\"{escape(name)}\">")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
