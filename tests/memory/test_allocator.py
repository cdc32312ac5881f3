"""pin_allocator: glibc's malloc thresholds fixed once per process, reported; a switch to leave them."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from engine.errors import ConfigError
from engine.memory import allocator

PROBE = ("import json; from engine.memory.allocator import pin_allocator; "
         "print(json.dumps([pin_allocator().as_record(), pin_allocator().as_record()]))")


def probe(env_value: str | None) -> list[dict]:
    """What a fresh process reports (the pin happens once per process)."""
    env = {k: v for k, v in os.environ.items() if k != "WORLDPAGER_MALLOC"}
    if env_value is not None:
        env["WORLDPAGER_MALLOC"] = env_value
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout)


def test_pinned_on_glibc_once_and_reported():
    first, again = probe(None)
    assert first == again
    if not first["libc"].startswith("glibc"):
        assert first["applied"] is False and first["reason"]
        return
    assert first == {"applied": True, "libc": first["libc"], "mmap_threshold": allocator.THRESHOLD_BYTES,
                     "trim_threshold": allocator.THRESHOLD_BYTES, "reason": ""}


def test_default_leaves_the_allocator_alone():
    record, _ = probe("default")
    assert record["applied"] is False and record["reason"] == "WORLDPAGER_MALLOC=default"
    assert record["mmap_threshold"] is None


def test_unknown_setting_is_a_config_error(monkeypatch):
    monkeypatch.setenv("WORLDPAGER_MALLOC", "huge")
    with pytest.raises(ConfigError, match="WORLDPAGER_MALLOC='huge'"):
        allocator._pin(allocator.THRESHOLD_BYTES)
