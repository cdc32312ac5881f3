"""The weight plan's rules: bytes per format and which blocks stay resident within a budget."""
import pytest

from engine.errors import ConfigError
from engine.planner.weight_plan import linear_bytes, resident_blocks


def test_linear_bytes_per_format():
    assert linear_bytes(10, 20, "bf16") == 10 * 20 * 2 + 10 * 2
    assert linear_bytes(10, 20, "int8") == 10 * 20 + 10 * 4 + 10 * 2
    assert linear_bytes(10, 20, "fp8", bias=False) == 10 * 20 + 10 * 4
    with pytest.raises(ConfigError, match="'int3'"):
        linear_bytes(1, 1, "int3")


def test_everything_resident_when_it_fits():
    r = resident_blocks([5, 5, 5], 15)
    assert (r.resident, r.streamed, r.buffer_bytes, r.device_bytes) == (3, 0, 0, 15)


def test_leading_blocks_resident_and_two_slots_for_the_rest():
    r = resident_blocks([4, 4, 4, 4, 4], 16)       # 2 resident (8) + 2 slots of 4 = 16
    assert (r.resident, r.streamed, r.buffer_bytes, r.device_bytes) == (2, 3, 8, 16)
    r = resident_blocks([4, 4, 4, 4, 4], 15)
    assert (r.resident, r.device_bytes) == (1, 12)


def test_budget_below_the_slots_is_one_line():
    with pytest.raises(ConfigError, match="streaming slots"):
        resident_blocks([4, 4], 7)
