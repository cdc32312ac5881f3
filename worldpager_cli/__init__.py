"""The ``worldpager`` command line: a thin click shell over the engine's public functions."""
