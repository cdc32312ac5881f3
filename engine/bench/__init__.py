"""Measurements behind ``worldpager bench``: host memory over a long session (``memory``), the store's
arms on a synthetic session (``experiments``), the O_DIRECT disk tier (``disk``) and the int4 quantiser's
backends side by side (``quant``), and what this machine offers (``doctor``, for ``worldpager doctor``). The product never imports this package."""
