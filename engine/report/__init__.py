"""Session reports: a session log (or several, overlaid) drawn as figures and one self-contained page.

``read`` loads a log up to where it is cut (a log that is not ours is a one-line ``InputError``);
``labels`` names each log from what its config changes; ``views`` turns logs into ``engine.report.plots``
figures, one per view; ``page`` writes the HTML page (images embedded, no network); ``write`` puts it
all in a directory, each file replaced atomically so a viewer never reads half of one; ``live``
refreshes them while a session runs.
"""
from engine.report.write import write_report

__all__ = ["write_report"]
