"""``worldpager batch JOBS``: many ``generate`` jobs, one model load per worker, resumable, retried.

Parse flags, plan the jobs (every check before anything runs), pick a backend (this process, one
process per device, or a Ray cluster), drive it, then print one line per finished job, a summary
table and one compact JSON line last. Exit 0 only when every job is done; 1 when any failed (or the
input was bad); 130 when interrupted (the jobs in hand stop after their chunk and resume next time).
"""
from __future__ import annotations

import signal
import sys
from pathlib import Path

import click

from worldpager_cli.json_output import emit_json, json_line, json_result
from tqdm import tqdm

from engine.errors import ConfigError
from engine.settings.options import SESSION_OPTIONS
from worldpager_cli.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, printable
from worldpager_cli.help import SectionedCommand
from worldpager_cli.options import Size, options_of

# Every job's defaults: the table's options (engine.settings.options) but those a batch sets per job or for itself
# (the outputs go under --out-dir, the device is the workers', --host-mem is the whole batch's); a job's
# own value wins.
NOT_SHARED = ("out", "log", "device", "host_mem")
SHARED = tuple(o.name for o in SESSION_OPTIONS if o.name not in NOT_SHARED)
SHARED_HELP = {"spill": "Spill directory template: {job} is the job's name (e.g. /mnt/nvme/{job}).",
               "image": "Start image (MG2 models).", "trajectory": "Trajectory file (with a job list whose jobs name none)."}


def shared_options(func):
    return options_of(SHARED, func, SHARED_HELP)


def worker_devices(devices: str | None, workers: int | None) -> list[str]:
    """One device per worker: ``--devices cuda:0,cuda:1``, or ``--workers N`` CPU workers."""
    import torch

    if workers is not None and workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {workers}")
    if devices is None:
        devices = "cuda:0" if torch.cuda.is_available() and workers is None else "cpu"
    names = [d.strip() for d in devices.split(",") if d.strip()]
    if not names:
        raise ConfigError(f"--devices {devices!r}: no device named")
    if names == ["cpu"]:
        return ["cpu"] * (workers or 1)
    if workers is not None and workers != len(names):
        raise ConfigError(f"--workers {workers} with --devices {devices}: one worker runs per device "
                          "(--workers N is for CPU workers: --devices cpu)")
    for name in names:
        _check_device(name, torch)
    if len(set(names)) != len(names):
        raise ConfigError(f"--devices {devices}: a device is named twice (one worker per device)")
    return names


def _check_device(name: str, torch) -> None:
    if name == "cpu":
        raise ConfigError("--devices: cpu with other devices; give --devices cpu --workers N for CPU workers")
    if not name.startswith("cuda"):
        raise ConfigError(f"--devices: {name!r} is not cuda:N or cpu")
    index = name.partition(":")[2] or "0"
    if not index.isdigit():
        raise ConfigError(f"--devices: {name!r} is not cuda:N")
    if not torch.cuda.is_available() or int(index) >= torch.cuda.device_count():
        have = torch.cuda.device_count() if torch.cuda.is_available() else 0
        raise ConfigError(f"--devices: {name} does not exist here ({have} CUDA devices)")


BATCH_SECTIONS = {**dict.fromkeys(("out_dir", "overwrite", "quiet"), "Output"),
                  **dict.fromkeys(("workers", "devices", "ray_address", "retries", "host_mem"), "Batch")}


@click.command(cls=SectionedCommand, sections=BATCH_SECTIONS, examples=(
    "# every trajectory file of a folder, one video each, on 2 CPU workers",
    "worldpager batch 'paths/*.yaml' --out-dir videos --workers 2 --chunks 40",
    "# a job list (one JSON object of generate options per line), one worker per GPU, spill per job",
    "worldpager batch jobs.jsonl --out-dir videos --devices cuda:0,cuda:1 --spill /mnt/nvme/{job}",
    "# run it again after a crash: what is done is skipped, the rest resumes",
    "worldpager batch jobs.jsonl --out-dir videos --devices cuda:0,cuda:1 --spill /mnt/nvme/{job}",
))
@click.argument("jobs")
@click.option("--out-dir", type=click.Path(path_type=Path), required=True, help="Where every job's MP4, log and config go, and the manifest.")
@click.option("--workers", type=int, help="CPU workers (processes; with --ray: CPU actors), each with its own model. Default: 1 (--ray: one per CPU).")
@click.option("--devices", help="One worker per device: cuda:0,cuda:1 (or cpu with --workers). Default: cuda:0 if present, else cpu.")
@click.option("--ray", "ray_address", is_flag=False, flag_value="local", default=None,
              help="Run on a Ray cluster: an address, 'auto' for the running one; without a value, a local Ray is started.")
@click.option("--retries", type=int, default=0, show_default=True, help="Tries again of a job that failed, in this run.")
@click.option("--host-mem", type=Size("GiB"), help="Host memory for the whole batch (24G, 512M; a plain number is GiB), divided between the workers. Default: what is available.")
@click.option("--overwrite", is_flag=True, help="Replace files at a job's outputs that this batch did not make "
              "(default: such a job is refused, the others run).")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors, the summary and the JSON line.")
@shared_options
@json_result
def batch(jobs, out_dir, workers, devices, ray_address, retries, host_mem, overwrite, quiet, **shared) -> None:
    """Render many jobs: JOBS is a JSONL, CSV or YAML job list (each job: generate options), or a quoted
    glob of trajectory files. Re-running skips what is done, resumes what was interrupted and retries
    what failed (manifest: OUT_DIR/batch-manifest.json); it replaces only what it made itself."""
    from engine.batch.jobs import load_jobs
    from engine.batch.manifest import Manifest

    if retries < 0:
        raise ConfigError(f"--retries must be >= 0, got {retries}")
    options = {k: (int(v) if k == "kv_bits" else v) for k, v in shared.items() if v is not None and v != ()}
    job_list = load_jobs(jobs, options)
    out_dir = out_dir.expanduser().resolve()
    backend, plans = _backend_and_plans(job_list, out_dir, workers, devices, ray_address, host_mem)
    try:
        with Manifest(out_dir) as manifest:
            result = _drive(plans, manifest, backend, retries, quiet, overwrite)
            _report(result, manifest, backend, out_dir)
    finally:
        getattr(backend, "shutdown", lambda: None)()
    if result.status == "interrupted":
        raise SystemExit(EXIT_INTERRUPTED)
    if result.status != "done":
        raise SystemExit(EXIT_BAD_INPUT)


def _backend_and_plans(job_list, out_dir, workers, devices, ray_address, host_mem):
    from engine.batch.plan import plan_jobs
    from engine.runtime.telemetry import available_memory, process_rss

    if ray_address is not None:
        from engine.batch.ray_backend import RayBackend

        if devices is not None:
            raise ConfigError("--ray places one actor per GPU of the cluster itself; drop --devices")
        if workers is not None and workers < 1:
            raise ConfigError(f"--workers must be at least 1, got {workers}")
        backend = RayBackend.connect(ray_address, workers, jobs=len(job_list))
        kind = "cuda" if backend.uses_gpus else "cpu"
        try:
            plans = plan_jobs(job_list, out_dir, backend.workers, kind, host_mem, backend.host_bytes, process_rss())
        except BaseException:
            backend.shutdown()
            raise
        return backend, plans
    names = worker_devices(devices, workers)
    plans = plan_jobs(job_list, out_dir, len(names), "cuda" if names[0] != "cpu" else "cpu", host_mem,
                      available_memory(), process_rss())
    from engine.batch.local import InlineBackend, ProcessBackend

    backend = InlineBackend(names[0]) if len(names) == 1 else ProcessBackend(names)
    return backend, plans


class _JobsProgress:
    """A bar over jobs on a terminal (its postfix: the job in hand's chunk), and one line per finished job."""

    def __init__(self, total: int, quiet: bool):
        self.quiet = quiet
        self.bar = tqdm(total=total, unit="job", dynamic_ncols=True) if sys.stderr.isatty() and not quiet else None

    def say(self, text: str, failure: bool = False) -> None:
        """One line on stderr; ``--quiet`` hides progress, never a failure."""
        if self.quiet and not failure:
            return
        text = printable(text)
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)
        else:
            click.echo(text, err=True)

    def __call__(self, event) -> None:
        if event.kind == "chunk" and self.bar is not None:
            r = event.record
            self.bar.set_postfix_str(f"{event.name} chunk {r['chunk'] + 1}", refresh=True)
        elif event.kind == "started":
            self.say(f"worldpager: {event.name}: started on {event.worker}")
        elif event.kind == "lost":
            self.say(f"worldpager: {event.name}: worker {event.worker} lost ({event.error}); resuming it elsewhere")
        elif event.kind == "finished":
            self._finished(event.result)

    def _finished(self, r) -> None:
        if r.status == "done":
            resumed = "" if r.resumed_at is None else f", resumed at chunk {r.resumed_at}"
            self.say(f"worldpager: {r.name}: done, {r.chunks} chunks in {r.wall_s:.1f} s "
                     f"({r.fps:.1f} fps{resumed}) on {r.worker}")
        else:
            self.say(f"worldpager: {r.name}: {r.status}" + (f": {r.error}" if r.error else ""),
                     failure=r.status == "failed")
        for note in r.notes:
            self.say(f"worldpager: {r.name}: {note}")
        if self.bar is not None and r.status in ("done", "failed"):
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _drive(plans, manifest, backend, retries, quiet, overwrite):
    from engine.batch.driver import BatchDriver
    from engine.batch.plan import no_savepoint_warnings

    progress = _JobsProgress(len(plans), quiet)

    def warn_once(todo) -> None:   # --quiet drops it, as generate's does (the logs' headers keep it)
        for line in [] if quiet else no_savepoint_warnings(todo):
            progress.say(f"worldpager: warning: {line}")

    driver = BatchDriver(plans, manifest, backend, retries=retries, on_event=progress, overwrite=overwrite,
                         on_todo=warn_once)
    try:
        with _StopOnSignals(driver, progress):
            return driver.run()
    finally:
        progress.close()


class _StopOnSignals:
    """First Ctrl-C, SIGTERM or SIGHUP: no new jobs, the running ones stop after their chunk; a second one
    interrupts at once."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self, driver, progress):
        self.driver, self.progress, self.stopping, self.previous = driver, progress, False, {}

    def _handler(self, signum, frame) -> None:
        if self.stopping:
            raise KeyboardInterrupt
        self.stopping = True
        self.driver.request_stop()
        name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        try:
            click.echo(f"\nworldpager: {name}: stopping the jobs after their current chunk ({name} again to abort)", err=True)
        except OSError:
            pass

    def __enter__(self):
        self.previous = {sig: signal.signal(sig, self._handler) for sig in self.SIGNALS}
        return self

    def __exit__(self, *exc):
        for sig, previous in self.previous.items():
            signal.signal(sig, previous)


def _fmt(value, spec: str) -> str:
    return "" if value is None else format(value, spec)


def _report(result, manifest, backend, out_dir: Path) -> None:
    from engine.batch.driver import summary_row

    from worldpager_cli.bench_output import echo_table

    rows = [summary_row(name, manifest.entry(name)) for name in result.jobs]
    echo_table(("job", "status", "chunks", "fps", "stall p99 ms", "RSS max MiB", "wall s", "worker"),
               [(r["name"], r["status"] + (" (skipped)" if r["name"] in result.skipped else ""),
                 _fmt(r["chunks"], "d"), _fmt(r["fps"], ".1f"), _fmt(r["stall_p99_ms"], ".1f"),
                 _fmt(r["rss_max_mib"], ".0f"), _fmt(r["wall_s"], ".1f"), r["worker"] or "") for r in rows])
    ran = len(result.results)
    counts = {s: sum(1 for r in rows if r["status"] == s) for s in ("done", "failed", "interrupted", "pending")}
    doc = {"command": "batch", "status": result.status, "backend": getattr(backend, "kind", "local"),
           "workers": backend.workers, "jobs": len(rows), **counts, "skipped": len(result.skipped),
           "ran": ran, "model_loads": result.model_loads, "wall_s": round(result.wall_s, 3),
           "jobs_per_hour": round(3600 * ran / result.wall_s, 1) if result.wall_s > 0 and ran else 0.0,
           "manifest": str(manifest.path), "results": rows}
    emit_json(json_line(doc))
