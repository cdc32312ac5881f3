"""The analytical model against the paper's anchors, its definitions, and its import rule (no torch)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from engine.planner import model as planner
from engine.config import model_config
from engine.errors import ConfigError
from engine.planner.model import GB, GiB, Budgets, DriveRates
from engine.planner.probe import probe_drive
from worldpager_cli.main import chunks_for_length

MG2 = model_config("mg2-universal").shape()
PAPER = Budgets.from_gib(host=32, device=24)      # RTX 4090, 32 GiB host, calibrated baselines
HOUR_CHUNKS = chunks_for_length(None, None, 60.0, MG2.fps, 9, 12)
SESSION_CHUNKS = chunks_for_length(None, None, 37.5, MG2.fps, 9, 12)


def mg2_plan(chunks: int, budgets: Budgets = PAPER, **kw) -> planner.Plan:
    return planner.plan(MG2, chunks, budgets, **kw)


# ---- bytes ----------------------------------------------------------------------------------------

def test_bytes_per_chunk_for_mg2():
    assert planner.bytes_per_chunk(MG2) == {"bf16": 486_604_800, "int8": 251_089_920,
                                            "int4": 129_438_720, "int2": 68_613_120}
    slots = planner.slot_bytes(MG2)
    assert slots["int4"] == 129_441_792 and all(s % 4096 == 0 for s in slots.values())
    # The staged k = 3 set in bf16 is the paper's "1.46 GB" pipelined transfer.
    assert 3 * planner.bytes_per_chunk(MG2)["bf16"] / GB == pytest.approx(1.46, abs=0.005)


# ---- spill points ---------------------------------------------------------------------------------

def test_spill_points_at_32_gib_are_the_papers():
    spills = planner.spill_chunks(MG2, PAPER)
    assert (spills["device-bf16"], spills["host-bf16"], spills["host-int4"]) == (21, 60, 226)


def test_64_gib_int4_dram_only_predicts_492():
    p = mg2_plan(600, Budgets.from_gib(host=64), store="dram-only", drive=None)
    assert p.spill_chunk["host-int4"] == 492 and p.stop_chunk == 492
    assert p.max_zero_stall_chunks == 492 and not p.disk_tier


@pytest.mark.parametrize("host_baseline", [2.64, 2.66, 2.68])
@pytest.mark.parametrize("device_baseline", [11.8, 12.0, 12.2])
def test_anchors_hold_across_the_calibrated_interval(host_baseline, device_baseline):
    """The documented feasible ranges: host baseline (2.6347, 2.6884], device (11.764, 12.217] GiB."""
    at32 = planner.spill_chunks(MG2, Budgets.from_gib(32, 24, host_baseline, device_baseline))
    at64 = planner.spill_chunks(MG2, Budgets.from_gib(64, None, host_baseline))
    assert (at32["device-bf16"], at32["host-bf16"], at32["host-int4"], at64["host-int4"]) == (21, 60, 226, 492)


def test_the_calibration_interval_is_tight_at_its_ends():
    assert planner.spill_chunks(MG2, Budgets.from_gib(64, host_baseline=2.70))["host-int4"] == 491
    assert planner.spill_chunks(MG2, Budgets.from_gib(32, host_baseline=2.62))["host-int4"] == 227
    assert planner.spill_chunks(MG2, Budgets.from_gib(32, 24, device_baseline=11.7))["device-bf16"] == 22


def test_video_before_the_wall_matches_the_abstract():
    """"exhausts host memory after 45 seconds of video in bf16 and after 2.8 minutes in int4"."""
    assert planner.video_seconds(MG2, 60) == pytest.approx(45, abs=0.5)
    assert planner.video_seconds(MG2, 226) / 60 == pytest.approx(2.8, abs=0.05)


def test_spill_is_the_first_chunk_that_does_not_fit():
    budgets = Budgets.from_gib(32)
    pool = planner.pool_bytes(budgets.host, budgets.host_baseline)
    n = planner.spill_chunks(MG2, budgets)["host-int4"]
    slot = planner.slot_bytes(MG2)["int4"]
    assert n * slot <= pool < (n + 1) * slot        # chunks 0 … n−1 fit, chunk n does not


def test_device_buffers_count_window_current_and_staging():
    b16 = MG2.kv_bytes_per_chunk(2.0)
    assert planner.window_chunks(MG2) == 1
    assert planner.device_buffer_bytes(MG2, retrieve_k=3, sink=False) == 5 * b16
    assert planner.device_buffer_bytes(MG2, retrieve_k=3, sink=True) == 6 * b16


def test_pool_arithmetic_mirrors_host_pool():
    from engine.memory import host_pool

    assert planner.MARGIN_BYTES == host_pool.DEFAULT_MARGIN and planner.MIN_POOL_SLOTS == host_pool.MIN_SLOTS
    for host_gib in (16, 32, 64):
        b = Budgets.from_gib(host_gib)
        for fmt, slot in planner.slot_bytes(MG2).items():
            assert planner.spill_chunks(MG2, b)[f"host-{fmt}"] == host_pool.pool_slots(b.host, b.host_baseline, slot)


def test_a_pool_the_session_would_refuse_is_a_config_error():
    with pytest.raises(ConfigError, match="--host-mem 6.00 GiB leaves room for"):
        mg2_plan(10, Budgets.from_gib(host=6), bits=16)


# ---- bandwidth and stalls -------------------------------------------------------------------------

def test_writeback_need_is_about_0_11_gbps():
    p = mg2_plan(SESSION_CHUNKS, drive=DriveRates(GB, GB))
    assert p.writeback_Bps / GB == pytest.approx(0.11, abs=0.01)


def test_prefetch_fails_near_0_1_gbps_of_reads():
    """The paper's drive cap slowed reads; our --drive-bw r=0.1 does the same (writes at drive speed)."""
    p = mg2_plan(SESSION_CHUNKS, drive=DriveRates(GB, GB))
    assert 0.1 <= p.read_Bps / GB < 0.12
    slow = mg2_plan(SESSION_CHUNKS, drive=planner.parse_drive_rates("r=0.1"))
    fine = mg2_plan(SESSION_CHUNKS, drive=planner.parse_drive_rates("r=0.25"))
    assert slow.read_stall and not slow.write_stall and not fine.read_stall
    # Reading falls 1.294 - 1.2 s behind per chunk at 0.1 GB/s (paper: P50 stall 75.9 ms) — but our
    # prefetch never waits for a read (a late chunk is a miss) and write-back runs at the drive's
    # speed, so the timeline has no chunk wait.
    assert slow.prefetch_stall_ms == pytest.approx(94.4, abs=1)
    assert not slow.stall_predicted and slow.first_stall_chunk is None and not fine.stall_predicted


def test_reads_and_write_back_take_turns_on_one_drive():
    """A cap on both directions of one drive: the writer steps aside for reads, so a chunk needs both."""
    p = mg2_plan(SESSION_CHUNKS, drive=DriveRates(GB, GB))
    assert p.threshold_Bps == pytest.approx(p.read_Bps + p.writeback_Bps)
    assert 0.21 < p.threshold_Bps / GB < 0.22
    both = mg2_plan(SESSION_CHUNKS, drive=planner.parse_drive_rates("0.1"))
    # Each direction alone overruns by 94 ms; together (each with its bucket's 4 MiB of credit,
    # gathered while the other direction moves) 2 x 1.2525 s - 1.2 s.
    assert both.read_s == pytest.approx(both.write_s) == pytest.approx(1.2525, abs=1e-3)
    assert both.prefetch_stall_ms == pytest.approx(1305, abs=1)
    assert not mg2_plan(SESSION_CHUNKS, drive=planner.parse_drive_rates("0.25")).stall_predicted


def test_k3_all_miss_would_contradict_the_measured_zero_stall_at_0_25_gbps():
    """Why disk_reads_per_chunk defaults to 1: three reads per chunk need 0.32 GB/s."""
    p = mg2_plan(SESSION_CHUNKS, drive=planner.parse_drive_rates("0.25"), disk_reads_per_chunk=3)
    assert p.read_Bps / GB == pytest.approx(0.324, abs=0.001) and p.stall_predicted


def test_on_demand_stall_is_the_synchronous_read_of_the_missed_bytes():
    stalls = [mg2_plan(SESSION_CHUNKS, drive=planner.parse_drive_rates(bw)).on_demand_stall_ms
              for bw in ("1.0", "0.25", "0.1")]
    # The read's bucket starts with 4 MiB of credit; at 0.1 GB/s write-back (1.25 s a block) no longer
    # fits in the 1.2 s chunk and the loop also waits for it. Paper P50: 116 / 454 / 1130 ms.
    assert stalls == pytest.approx([125.2, 501.0, 1304.9], abs=0.1)


def test_read_plus_write_stays_below_0_21_gbps_at_the_long_sessions_chunk_time():
    long_session_s = 63.2 * 60 / 3000
    p = mg2_plan(HOUR_CHUNKS, Budgets.from_gib(64), drive=DriveRates(), chunk_s=long_session_s)
    assert (p.read_Bps + p.writeback_Bps) / GB < 0.21


def test_a_drive_that_only_caps_reads_leaves_writes_uncapped():
    p = mg2_plan(SESSION_CHUNKS, drive=planner.parse_drive_rates("r=0.1"))
    assert p.read_stall and not p.write_stall and not p.stall_predicted   # late reads are misses


def test_sessions_that_fit_the_pool_never_stall_on_the_drive():
    p = mg2_plan(100, drive=planner.parse_drive_rates("0.01"))
    assert not p.uses_disk and not p.stall_predicted and p.disk_bytes == 0


# ---- storage and session length -------------------------------------------------------------------

def test_the_37_5_minute_session_writes_334_gib():
    p = mg2_plan(SESSION_CHUNKS, drive=DriveRates(GB, GB))
    assert SESSION_CHUNKS == 3001 and p.uses_disk
    assert p.disk_bytes / GiB == pytest.approx(334, abs=1)


def test_one_hour_at_64_gib_needs_300_to_600_gib():
    """Documented assumption: one hour of video (4801 chunks), all of its KV, int2 … int4."""
    at64 = Budgets.from_gib(64)
    int2, int4 = (mg2_plan(HOUR_CHUNKS, at64, bits=b, drive=DriveRates()) for b in (2, 4))
    assert HOUR_CHUNKS == 4801
    assert int2.storage_bytes / GiB == pytest.approx(306.8, abs=0.1)
    assert int4.storage_bytes / GiB == pytest.approx(578.8, abs=0.1)
    assert 300 <= int2.storage_bytes / GiB < int4.storage_bytes / GiB <= 600
    assert 300 <= int4.disk_bytes / GiB <= 600                     # the drive's share beyond the pool


def test_longest_zero_stall_session():
    fast = mg2_plan(SESSION_CHUNKS, drive=DriveRates(GB, GB))
    slow = mg2_plan(SESSION_CHUNKS, drive=planner.parse_drive_rates("0.05"))
    small_disk = mg2_plan(SESSION_CHUNKS, drive=DriveRates(GB, GB), disk_free_bytes=10 * 129_441_792)
    no_disk = mg2_plan(SESSION_CHUNKS, drive=None)
    assert fast.max_zero_stall_chunks is None and fast.stop_chunk is None
    assert slow.max_zero_stall_chunks == 227
    assert small_disk.max_zero_stall_chunks == 236 and small_disk.stop_chunk == 236   # the drive fills
    assert no_disk.max_zero_stall_chunks == 226 and no_disk.stop_chunk == 226


def test_device_only_stops_at_the_device_spill():
    p = mg2_plan(100, store="device-only", drive=DriveRates())
    assert p.session_spill_chunk == 21 and p.stop_chunk == 21 and not p.disk_tier


# ---- inputs ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec", ["0.25", "1", "r=0.5,w=0.2", "r=0.5", "write=2", "none", "", None, 0.3])
def test_drive_rates_parse_like_the_transfer_module(spec):
    from engine.memory.transfer import parse_drive_bw

    expected = parse_drive_bw(spec)
    assert planner.parse_drive_rates(spec) == DriveRates(expected.read, expected.write)


@pytest.mark.parametrize("spec", ["-1", "0", "fast", "r=0.5,x=1", "r=nan"])
def test_bad_drive_rates_are_config_errors(spec):
    with pytest.raises(ConfigError, match="--drive-bw"):
        planner.parse_drive_rates(spec)


def test_cap_rates_takes_the_slower_per_direction():
    measured = DriveRates(3 * GB, 2 * GB)
    assert planner.cap_rates(measured, DriveRates(0.5 * GB, None)) == DriveRates(0.5 * GB, 2 * GB)
    assert planner.cap_rates(measured, DriveRates()) == measured


@pytest.mark.parametrize("kw, needle", [({"host": -1}, "--host-mem"), ({"host": 32, "device": 0}, "--device-mem"),
                                        ({"host": 32, "host_baseline": -0.5}, "--baseline-gib")])
def test_bad_budgets_name_the_flag(kw, needle):
    with pytest.raises(ConfigError, match=needle):
        Budgets.from_gib(**kw)


@pytest.mark.parametrize("kw", [{"chunk_s": 0}, {"disk_reads_per_chunk": -1}, {"bits": 3}])
def test_bad_plan_inputs_are_config_errors(kw):
    with pytest.raises(ConfigError):
        mg2_plan(10, **kw)


# ---- the import rule and the probe ----------------------------------------------------------------

def test_planner_probe_and_plan_command_import_no_torch():
    code = ("import sys, engine.planner.model, engine.planner.probe, worldpager_cli.plan, worldpager_cli.main; "
            "bad = [m for m in ('torch', 'numpy', 'triton') if m in sys.modules]; "
            "assert not bad, bad")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_probe_measures_and_removes_its_file(tmp_path):
    probe = probe_drive(tmp_path, 8 << 20, piece_bytes=1 << 20)
    assert probe.nbytes == 8 << 20 and probe.read_Bps > 0 and probe.write_Bps > 0 and probe.free_bytes > 0
    assert list(tmp_path.iterdir()) == []


def test_probe_refuses_a_missing_directory(tmp_path):
    from engine.errors import OutputError

    with pytest.raises(OutputError, match="not a writable directory"):
        probe_drive(tmp_path / "absent", 1 << 20)


def test_store_modes_other_than_prefetch():
    fast = DriveRates(GB, GB)
    on_demand = mg2_plan(SESSION_CHUNKS, store="on-demand", drive=fast)
    sync = mg2_plan(100, store="sync", drive=fast)
    window = mg2_plan(SESSION_CHUNKS, store="window", drive=None)
    assert on_demand.stall_predicted and on_demand.max_zero_stall_chunks == 227
    assert not mg2_plan(100, store="on-demand", drive=fast).stall_predicted   # never leaves the pool
    assert sync.stall_predicted and sync.max_zero_stall_chunks == 2
    assert not window.stall_predicted and window.stop_chunk is None and window.max_zero_stall_chunks is None


# ---- the pool as the session sizes it -------------------------------------------------------------

def test_pool_slots_set_the_spill_exactly_even_below_the_minimum():
    for slots in (4, 12, 507):
        p = mg2_plan(600, Budgets(host=0, pool_slots=slots), drive=DriveRates(GB, GB))
        assert p.session_spill_chunk == p.pool_slots == slots and p.spill_chunk["host-int4"] == slots
        assert p.pool_bytes == slots * planner.slot_bytes(MG2)["int4"]


def test_cpu_staging_counts_with_the_baseline_as_the_session_sizes_the_pool():
    from engine.memory.budget import pool_slots

    staging = planner.cpu_staging_bytes(MG2, "prefetch", retrieve_k=3)
    assert staging == 3 * MG2.kv_bytes_per_chunk(4.0)
    assert planner.cpu_staging_bytes(MG2, "window", retrieve_k=3) == 0
    b = Budgets(host=40 * GiB, host_baseline=2 * GiB, host_staging=staging)
    slot = planner.slot_bytes(MG2)["int4"]
    assert planner.spill_chunks(MG2, b)["host-int4"] == pool_slots(b.host, b.host_baseline + staging, slot)


def test_without_a_host_budget_a_small_machine_runs_the_minimum_pool():
    tiny = Budgets(host=3 * GiB, host_given=False)
    assert mg2_plan(50, tiny, drive=DriveRates()).session_spill_chunk == planner.MIN_POOL_SLOTS
    with pytest.raises(ConfigError, match="leaves room for"):
        mg2_plan(50, Budgets(host=3 * GiB), drive=DriveRates())


def test_the_mirrored_constants_are_the_stores():
    import inspect

    from engine.memory.disk import DiskTier
    from engine.memory.store import KVStore
    from engine.memory.transfer import DriveIO, TokenBucket
    from engine.planner import timeline as tl

    default = lambda fn, name: inspect.signature(fn).parameters[name].default   # noqa: E731
    assert planner.BUCKET_BURST_BYTES == default(TokenBucket.__init__, "burst")
    assert tl.PIECE_BYTES == default(DiskTier.__init__, "piece_bytes")
    assert tl.LOW_WATER == default(KVStore.__init__, "low_water")
    assert tl.MAX_YIELD_S == default(DriveIO.__init__, "max_yield_s")


# ---- the drive timeline ---------------------------------------------------------------------------

def timeline_of(**kw):
    from engine.planner.timeline import TimelineInputs, timeline

    base = dict(chunks=40, slots=8, block_bytes=32 << 20, chunk_s=1.0, read_rate=None, write_rate=None,
                burst=planner.BUCKET_BURST_BYTES)
    return timeline(TimelineInputs(**{**base, **kw}))


def test_a_drive_faster_than_the_chunks_never_stalls():
    assert max(timeline_of(read_rate=0.2 * GB, write_rate=0.2 * GB)) == 0.0


def test_write_back_slower_than_the_chunks_stalls_by_the_difference_after_the_slack():
    # 32 MiB blocks at 16 MiB/s: 2 s of writing per 1 s chunk; the put waits once three writes are
    # outstanding (the pool's low water), then every chunk waits one second.
    stalls = timeline_of(write_rate=16 * 2**20, burst=1)
    first = next(c for c, s in enumerate(stalls) if s > 0)
    assert 8 <= first <= 12
    assert stalls[-5:] == pytest.approx([1.0] * 5, abs=1e-6)


def test_on_demand_waits_for_its_reads_and_their_dequantisation():
    stalls = timeline_of(read_rate=32 * 2**20, burst=1, sync_reads=True, stage_s=0.25, reads_from=10)
    assert stalls[:10] == [0.0] * 10 and stalls[-1] == pytest.approx(1.25, abs=1e-6)


def test_urgent_write_back_does_not_step_aside_for_reads():
    # Reads that take every chunk's whole length would hold a writer that steps aside for them.
    kw = dict(read_rate=32 * 2**20, write_rate=48 * 2**20, burst=1, reads_from=9)
    polite, urgent = timeline_of(urgent_writeback=False, **kw), timeline_of(**kw)
    assert sum(urgent) < sum(polite)


def test_plan_answers_where_torch_cannot_be_imported(tmp_path):
    """The planner reads shapes (``engine.facts.layout.ModelShape`` from the torch-free configs), not models:
    ``worldpager plan`` for MG2 and LingBot works with a torch that raises on import."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "torch.py").write_text("raise ImportError('torch is broken here')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shadow), os.environ.get("PYTHONPATH", "")])}
    for preset in ("mg2-4090-32g", "lingbot-fast-h100-64g"):
        result = subprocess.run([sys.executable, "-c", "from worldpager_cli.main import cli; cli()", "plan",
                                 "--preset", preset, "--minutes", "10", "--json"], capture_output=True, text=True,
                                timeout=120, env=env, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["chunks"] == 801
