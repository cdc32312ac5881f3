"""The per-card tables of docs/lingbot.md and docs/first_mg2_run.md are what ``python3 -m engine.planner.cards``
prints (the whole-device plan per card and model), and the 24 GiB rows say what the planner chooses."""
from __future__ import annotations

from pathlib import Path

from engine.planner.cards import card_rows, card_table

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_docs_carry_the_generated_table():
    table = card_table()
    for page in ("lingbot.md", "first_mg2_run.md"):
        assert table in (DOCS / page).read_text(encoding="utf-8"), f"docs/{page}: run python3 -m engine.planner.cards"


def test_the_24_gib_rows():
    rows = {tuple(cell.strip() for cell in row.split("|")[1:3]): row for row in card_rows()}
    mg2, lingbot = rows[("RTX 4090 24 GB", "mg2-universal")], rows[("RTX 4090 24 GB", "lingbot-fast")]
    assert "| yes | bf16 | 0 of 30 | chunk |" in mg2 and "| 1.20 (1.20) |" in mg2
    assert "| yes | int8 |" in lingbot and "| layer |" in lingbot
