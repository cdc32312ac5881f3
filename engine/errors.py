"""User-facing error types.

Owns the split between *our* bugs (plain ``assert``) and the *user's* mistakes (a ``WorldPagerError``
subclass whose message names the bad value). The CLI turns every ``WorldPagerError`` into one line on
stderr and exit code 1; anything else is an internal error (exit 70).
"""


class WorldPagerError(Exception):
    """Base class: a problem with the user's input or environment, reported as one line."""


class ConfigError(WorldPagerError):
    """A preset, flag or config value is invalid (unknown key, wrong type, out of range)."""


class CheckpointError(WorldPagerError):
    """A checkpoint directory or file is missing, unreadable, or has wrong keys or shapes."""


class InputError(WorldPagerError):
    """A start image, trajectory or other input file is missing or malformed."""


class OutputError(WorldPagerError):
    """An output path (video, log, spill directory) cannot be written."""


class HorizonError(WorldPagerError):
    """A position lies past the model's native rotary table and the position mode forbids it."""


class SavePointError(InputError):
    """A save-point file is damaged or unreadable; ``reason`` says what is wrong, the message names the file."""

    def __init__(self, path, reason: str):
        super().__init__(f"save point {path}: {reason}")
        self.path, self.reason = path, reason

    def __reduce__(self):   # pickles (a background worker's failure) rebuild from path and reason
        return type(self), (self.path, self.reason)


class ResourceLimitError(WorldPagerError):
    """The process ran out of memory, threads or file descriptors: the message names the limit (``ulimit -v``,
    ``ulimit -n``, the memory available) and the fix (``engine.files.limits``)."""
