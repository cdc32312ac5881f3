"""Host pool sizing arithmetic, slot alignment, one allocation resident from the start."""
from __future__ import annotations

import psutil
import pytest
import torch

from engine.errors import ConfigError
from engine.memory.host_pool import ALIGN, GiB, HostPool, pool_slots

MiB = 1 << 20


def test_pool_slots_is_budget_minus_baseline_minus_margin():
    assert pool_slots(16 * GiB, 1 * GiB, 128 * MiB) == (13 * GiB) // (128 * MiB) == 104
    assert pool_slots(64 * GiB, 3 * GiB, 129_441_792) == (59 * GiB) // 129_441_792
    assert pool_slots(4 * GiB, 0, 64 * MiB, margin_bytes=GiB, min_slots=1) == 48


@pytest.mark.parametrize("host, baseline", [(3 * GiB, GiB), (2 * GiB, 4 * GiB)])
def test_pool_too_small_is_a_config_error_naming_the_numbers(host, baseline):
    with pytest.raises(ConfigError, match="--host-mem") as info:
        pool_slots(host, baseline, 128 * MiB)
    assert "\n" not in str(info.value) and "need at least 8" in str(info.value)


def test_slots_are_aligned_views_of_one_allocation():
    pool = HostPool(5, 3 * ALIGN)
    assert pool.nbytes == pool.data.numel() == 5 * 3 * ALIGN
    assert all(pool.slot(i).data_ptr() % ALIGN == 0 for i in range(5))
    assert [pool.slot(i).data_ptr() - pool.data.data_ptr() for i in range(5)] == \
        [i * 3 * ALIGN for i in range(5)]
    pool.slot(2).fill_(7)
    view = pool.buffer(2)
    assert len(view) == 3 * ALIGN and view[0] == 7 and view[-1] == 7
    view[5] = 9                                      # the memoryview is the same memory
    assert int(pool.slot(2)[5]) == 9 and int(pool.slot(1).sum()) == 0
    assert not pool.pinned or torch.cuda.is_available()
    pool.close()


def test_pool_is_resident_from_the_start():
    rss = psutil.Process().memory_info().rss
    pool = HostPool(16, 4 * MiB)                     # 64 MiB, pre-faulted
    grown = psutil.Process().memory_info().rss - rss
    assert grown >= 0.9 * pool.nbytes
    pool.slot(15).fill_(1)                           # touching it does not grow the process
    assert psutil.Process().memory_info().rss - rss < pool.nbytes + 8 * MiB
    pool.close()


@pytest.mark.gpu
def test_pool_is_pinned_with_cuda_host_register():
    pool = HostPool(4, 64 * 1024)
    assert pool.pinned and pool.data.is_pinned()
    dev = torch.arange(64 * 1024, device="cuda").to(torch.uint8)
    pool.slot(1).copy_(dev, non_blocking=True)
    torch.cuda.synchronize()
    assert torch.equal(pool.slot(1), dev.cpu())
    pool.close()
    assert not pool.pinned
