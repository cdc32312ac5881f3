"""MG2's parity fixture with ``--kv-paging layer``: the official code's tensors, within tolerance, and the
very same errors as chunk paging (the context holds the same bytes; only where they wait differs)."""
from __future__ import annotations

from engine.model.parity import dit as parity_dit
from engine.model.parity.fixture import DEFAULT_TOLERANCE


def test_mg2_parity_holds_with_layer_paging(parity_fixtures, monkeypatch):
    path = parity_fixtures / "universal_tiny.safetensors"
    chunk_rows = parity_dit.dit_rows(path)
    real = parity_dit.AttentionContext
    monkeypatch.setattr(parity_dit, "AttentionContext", lambda layout, **kw: real(layout, paging="layer", **kw))
    layer_rows = parity_dit.dit_rows(path)
    assert len(layer_rows) == len(chunk_rows) > 0
    assert any(n.startswith("kv.layer") for n, _ in layer_rows)     # the context itself was compared
    bad = [(n, e) for n, e in layer_rows if not e < DEFAULT_TOLERANCE]
    assert not bad, bad
    assert layer_rows == chunk_rows                                  # bit for bit: the same errors
