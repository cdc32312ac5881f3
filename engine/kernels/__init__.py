"""Compute kernels: import them only through :mod:`engine.kernels.ops` (reference or Triton behind it)."""
