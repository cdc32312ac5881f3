"""Measurements behind ``worldpager bench``: host memory over a long session (``memory``), the store's
arms on a synthetic session (``experiments``), the O_DIRECT disk tier (``disk``) and the int4 quantiser's
backends side by side (``quant``). The product never imports this package."""
