"""The report's HTML page: self-contained, opens offline.

Owns the page's layout: a title naming the sessions, the notes of cut logs, then the first screen —
three answers (did it stall, did host memory stay flat, how fast: ``engine.report.answers``), one row
per session — then the summary table, then every figure under its one heading (with a line saying
what its empty panels say: "no stalls (40 chunks)"). The figure's image
carries no title of its own (the heading names it; the image points at the heading with
``aria-labelledby``), so each figure's title is on the page exactly once. Each ``<img>``'s ``src`` is a
``data:image/png;base64`` URI of the same PNG written beside it. No script, no stylesheet or font from
elsewhere: the page needs no network.
"""
from __future__ import annotations

import base64
from html import escape

from engine.report.answers import QUESTIONS, Answer

STYLE = ("body{font-family:sans-serif;margin:1.5em;max-width:1100px;font-size:16px}table{border-collapse:collapse}"
         "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}td:first-child,th:first-child"
         "{text-align:left}img{max-width:100%;display:block;margin:0.5em 0 1.5em}.note{color:#a33}"
         "#answers{display:flex;gap:1em;flex-wrap:wrap;margin:1em 0}"
         ".answer{flex:1 1 300px;border:1px solid #ccc;border-radius:6px;padding:0.6em 1em}"
         ".answer h2{font-size:1.1em;margin:0 0 0.4em}.verdict{font-size:1.4em;font-weight:bold}"
         ".empty{color:#555;margin:0.2em 0}.good{color:#1a7f37}.bad{color:#b42318}.detail{color:#444;font-size:0.9em}")


def _answer_html(label: str, answer: Answer, several: bool) -> str:
    tone = {True: " good", False: " bad"}.get(answer.good, "")
    who = f"<div class=\"who\">{escape(label)}</div>" if several else ""
    return (f"{who}<div class=\"verdict{tone}\">{escape(answer.verdict)}</div>"
            f"<div class=\"detail\">{escape(answer.detail)}</div>")


def render_answers(labels: list[str], answers: list[tuple[Answer, ...]]) -> str:
    """The first screen: one box per question, one answer per session in it."""
    boxes = []
    for i, question in enumerate(QUESTIONS):
        body = "".join(_answer_html(label, a[i], len(labels) > 1) for label, a in zip(labels, answers))
        boxes.append(f"<section class=\"answer\"><h2>{escape(question)}</h2>{body}</section>")
    return "<div id=\"answers\">" + "".join(boxes) + "</div>"


def render_page(title: str, labels: list[str], notes: list[str], rows: list[tuple[str, list[str]]],
                figures: list[tuple[str, str, bytes, list[str]]], answers: list[tuple[Answer, ...]] | None = None) -> str:
    """``figures``: (name, title, PNG bytes, what its empty panels say) in page order; ``answers``: each
    session's three answers."""
    parts = ["<!DOCTYPE html>", "<html lang=\"en\"><head><meta charset=\"utf-8\">",
             f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>",
             f"<h1>{escape(title)}</h1>"]
    parts += [f"<p class=\"note\">{escape(n)}</p>" for n in notes]
    if answers:
        parts.append(render_answers(labels, answers))
    parts.append("<h2>Summary</h2><table id=\"summary\"><thead><tr><th></th>"
                 + "".join(f"<th>{escape(label)}</th>" for label in labels) + "</tr></thead><tbody>")
    parts += ["<tr><td>" + escape(name) + "</td>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>"
              for name, cells in rows]
    parts.append("</tbody></table>")
    for name, caption, png, empty in figures:
        uri = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
        said = f"<p class=\"empty\">{escape('; '.join(empty))}</p>" if empty else ""
        parts.append(f"<h2 id=\"{escape(name)}\">{escape(caption)}</h2>{said}"
                     f"<img src=\"{uri}\" alt=\"\" aria-labelledby=\"{escape(name)}\" data-view=\"{escape(name)}\">")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
