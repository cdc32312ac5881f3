"""Parity with the official MG2 code: the fixture reader (``fixture``), one comparison per component
(``dit``, ``vae``, ``clip``) and the command that runs every case in a fixture file (``runner``;
``python -m engine.model.parity FILE...``). Nothing in the generation path imports this package."""
