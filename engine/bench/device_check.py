"""The device check (``worldpager bench device``, ``scripts/device_check.sh``): everything that needs a GPU,
in one run of at most a few minutes, written as one JSON document and one Markdown table.

Owns the steps (``STEPS``, in the order of ``engine.bench.device_step_names``), their time budgets and
what happens when one goes wrong. The steps themselves live in ``engine.bench.device_steps`` and
``engine.bench.device_models``.

How it runs: the steps run one after another in a child process (``python -m engine.bench.device_check``)
that reports each step's start and its row to a progress file. The parent watches it: a step that runs
past its budget has the child's whole process group killed (its own subprocesses too) and is recorded
as failed; a child that dies (a crash, a CUDA error that poisons its context: the child exits after a
failed step once CUDA is initialised) is replaced by a fresh one that goes on with the next step. So a
step that raises, hangs or kills its process is one failed row, and the steps after it still run. The
whole run is bounded by ``budget_s``: a step is given at most what is left, and skipped when that is
under ``MIN_STEP_S``.

A row: ``name``, ``what`` (the step in a few words), ``status`` (ok | failed | skipped), ``reason`` (one line; None when ok), ``seconds``,
``budget_s``, ``summary`` (one line for the table), ``figures`` (the step's numbers), ``rss_bytes`` and
``device_peak_bytes`` of the child after the step (peak device memory since the step started; 0 on
the CPU). The document: ``check``, ``schema``, ``dry_run``, ``status`` (ok when no step failed),
``started``, ``seconds``, ``budget_s``, ``device``, ``steps`` (rows in ``STEPS`` order) and the names
that were ``ok`` / ``failed`` / ``skipped``. ``--dry-run`` runs the same steps on the CPU at tiny sizes
(``StepContext.dry_run``), the Triton kernels under their interpreter.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from engine.bench import device_models as models
from engine.bench import device_steps as steps
from engine.bench import device_weights
from engine.bench.device_steps import StepContext, StepFailed, StepSkipped
from engine.files.output_files import check_output_dir

SCHEMA = 1
DEFAULT_BUDGET_S = 450.0       # 7.5 minutes: under the 8 the check promises, inside a 10-minute command
DRY_BUDGET_S = 300.0        # a dry run takes 30-60 s; the budget is for a loaded CI machine
MIN_STEP_S = 5.0
POLL_S = 0.1
REPO_ROOT = steps.REPO_ROOT


@dataclass(frozen=True)
class Step:
    name: str
    fn: Callable[[StepContext], tuple[str, dict]]
    budget_s: float            # on a GPU
    dry_budget_s: float        # in a dry run on a CPU
    what: str


STEPS: dict[str, Step] = {s.name: s for s in (
    Step("env", steps.env_step, 60, 30, "versions, the device, a bf16 matmul"),
    Step("pytest_gpu", steps.pytest_step, 150, 90, "pytest -m gpu"),
    Step("quant", steps.quant_step, 60, 60, "int4 kernels (Triton vs reference vs copy), pinned pool copies"),
    Step("parity_tiny", models.parity_tiny_step, 90, 90, "tiny on the device in bf16 vs the CPU"),
    Step("parity_micro", models.parity_micro_step, 45, 60, "micro on the device in bf16 vs the CPU"),
    Step("dit_mg2", models.dit_step, 90, 60, "MG2's full-size DiT on random weights: step and chunk time"),
    Step("arena", models.arena_step, 45, 60, "the arena model's chunk time"),
    Step("session_mp4", steps.session_mp4_step, 45, 60, "a micro session end to end into its MP4"),
    Step("synthetic_session", steps.synthetic_session_step, 200, 120,
         "MG2-size KV through the disk tier: prefetch vs on-demand at 0.25 GB/s"),
    Step("weights", device_weights.weights_step, 90, 60,
         "MG2's DiT: resident vs half the blocks streamed vs int8 (chunk time, exactness, int8 error)"),
)}


def run_device_check(out: Path, *, dry_run: bool, names: list[str] | None = None,
                     budget_s: float | None = None, step_budgets: dict[str, float] | None = None,
                     spill: Path | None = None, echo: Callable[[str], None] = lambda line: None) -> dict:
    """Run the steps; write ``device_check.json`` and ``device_check.md`` (and the children's output,
    ``device_check.log``) under ``out``; return the document."""
    names = list(STEPS) if names is None else names
    budget_s = budget_s if budget_s is not None else (DRY_BUDGET_S if dry_run else DEFAULT_BUDGET_S)
    budgets = {n: (STEPS[n].dry_budget_s if dry_run else STEPS[n].budget_s) for n in names}
    budgets.update(step_budgets or {})
    check_output_dir(out, "--out", ("device_check.log", "device_check.json", "device_check.md"))
    out.mkdir(parents=True, exist_ok=True)
    log = out / "device_check.log"
    log.write_text("")
    work = Path(tempfile.mkdtemp(prefix="wp-device-"))
    started, t0 = datetime.now(timezone.utc), time.monotonic()
    deadline = time.time() + budget_s
    rows: dict[str, dict] = {}
    try:
        pending = list(names)
        while pending:
            new = _run_child(pending, dry_run=dry_run, work=work, spill=spill, deadline=deadline,
                             budgets=budgets, log=log, echo=echo)
            for row in new:
                rows[row["name"]] = row
            pending = [n for n in pending if n not in rows]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ordered = [{"name": n, "what": STEPS[n].what, **rows[n]} for n in names]
    env = rows.get("env", {}).get("figures", {})
    doc = {"check": "device", "schema": SCHEMA, "dry_run": dry_run,
           "status": "failed" if any(r["status"] == "failed" for r in ordered) else "ok",
           "started": started.isoformat(timespec="seconds"), "seconds": time.monotonic() - t0,
           "budget_s": budget_s, "device": env.get("device"), "steps": ordered,
           **{s: [r["name"] for r in ordered if r["status"] == s] for s in ("ok", "failed", "skipped")}}
    (out / "device_check.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out / "device_check.md").write_text(markdown(doc))
    return doc


def _run_child(pending: list[str], *, dry_run: bool, work: Path, spill: Path | None, deadline: float,
               budgets: dict[str, float], log: Path, echo: Callable[[str], None]) -> list[dict]:
    """One child process over ``pending``; the rows of the steps it started (see the module docstring)."""
    progress = work / f"progress-{time.monotonic_ns()}.jsonl"
    progress.touch()
    args = {"steps": pending, "dry_run": dry_run, "work": str(work), "spill": str(spill) if spill else None,
            "deadline": deadline, "budgets": budgets, "progress": str(progress)}
    env = dict(os.environ, PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p))
    if dry_run:
        env.setdefault("TRITON_INTERPRET", "1")   # read when triton is imported: before any step runs
    with open(log, "ab") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "engine.bench.device_check", json.dumps(args)],
                                stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=work, start_new_session=True)
    rows: list[dict] = []
    current: tuple[str, float, float] | None = None   # (step, monotonic start, seconds allowed)
    reader = _Lines(progress)
    while True:
        rc = proc.poll()
        for event in reader.new():
            if event["event"] == "start":
                current = (event["name"], time.monotonic(), event["allowed_s"])
                echo(f"{event['name']}: started ({event['allowed_s']:.3g} s budget)")
            else:
                rows.append(event["row"])
                current = None
                echo(f"{event['row']['name']}: {_status_line(event['row'])}")
        if rc is not None:
            break
        if current is not None and time.monotonic() - current[1] > current[2]:
            os.killpg(proc.pid, signal.SIGKILL)   # the child's group: its pytest or session processes too
            proc.wait()
            rows.append(_row(current[0], "failed", f"ran past its budget of {current[2]:g} s and was stopped",
                             current[2], current[2]))
            echo(f"{current[0]}: {_status_line(rows[-1])}")
            return rows
        time.sleep(POLL_S)
    if current is not None:
        rows.append(_row(current[0], "failed", f"its process exited with {_exit(rc)} during the step "
                         f"(see {log.name})", time.monotonic() - current[1], current[2]))
        echo(f"{current[0]}: {_status_line(rows[-1])}")
    elif not rows and rc != 0:   # died before its first step: the same would happen again
        reason = f"the check's process exited with {_exit(rc)} before the step: {_tail(log)}"
        rows = [_row(n, "failed", reason, 0.0, budgets[n]) for n in pending]
    return rows


class _Lines:
    """Complete JSON lines appended to a file since the last call."""

    def __init__(self, path: Path):
        self.path, self.offset, self.rest = path, 0, ""

    def new(self) -> list[dict]:
        with open(self.path, encoding="utf-8") as f:
            f.seek(self.offset)
            text = f.read()
            self.offset = f.tell()
        *lines, self.rest = (self.rest + text).split("\n")
        return [json.loads(line) for line in lines if line.strip()]


def _exit(rc: int) -> str:
    return f"signal {-rc}" if rc < 0 else f"code {rc}"


def _tail(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


def _row(name: str, status: str, reason: str | None, seconds: float, budget_s: float, summary: str = "",
         figures: dict | None = None, **extra) -> dict:
    return {"name": name, "status": status, "reason": reason, "seconds": round(seconds, 3), "budget_s": budget_s,
            "summary": summary, "figures": figures or {}, **extra}


def _status_line(row: dict) -> str:
    return f"{row['status']} ({row['seconds']:.1f} s){': ' + row['reason'] if row['reason'] else ''}"


# ---- the child -------------------------------------------------------------------------------------------

def child_main(args: dict) -> int:
    """Run ``args['steps']`` in order, appending a start event and a row per step to the progress file;
    exit 3 after a failed step once CUDA is initialised (its context may be broken: a fresh process goes on)."""
    import torch

    work, spill = Path(args["work"]), Path(args["spill"]) if args["spill"] else None
    with open(args["progress"], "a", encoding="utf-8") as progress:
        def emit(event: dict) -> None:
            progress.write(json.dumps(event) + "\n")
            progress.flush()

        for name in args["steps"]:
            left = args["deadline"] - time.time()
            allowed = min(args["budgets"][name], left)
            if left < MIN_STEP_S:
                emit({"event": "row", "row": _row(name, "skipped", f"the check's budget was spent ({max(left, 0):.0f} s "
                                                  "left)", 0.0, max(allowed, 0.0))})
                continue
            emit({"event": "start", "name": name, "allowed_s": allowed})
            print(f"==== {name} ====", flush=True)
            row = run_step(name, StepContext(args["dry_run"], work, spill, allowed))
            emit({"event": "row", "row": row})
            if row["status"] == "failed" and torch.cuda.is_initialized():
                return 3
    return 0


def run_step(name: str, ctx: StepContext) -> dict:
    """One step as a row: ok with its figures, skipped with the reason, failed with its one-line reason."""
    import torch

    from engine.runtime.telemetry import process_rss

    cuda = torch.cuda.is_available() and not ctx.dry_run
    if cuda and torch.cuda.is_initialized():
        torch.cuda.reset_peak_memory_stats()
    t0 = time.monotonic()
    summary, figures, status, reason = "", {}, "ok", None
    try:
        summary, figures = STEPS[name].fn(ctx)
    except StepSkipped as exc:
        status, reason = "skipped", str(exc)
    except StepFailed as exc:
        status, reason, summary, figures = "failed", str(exc), exc.summary, exc.figures
    except Exception as exc:   # any fault of a step is its row, and the next step runs
        traceback.print_exc()
        status, reason = "failed", one_line(exc)
    peak = 0
    if cuda and torch.cuda.is_initialized():
        peak = torch.cuda.max_memory_allocated()
        torch.cuda.empty_cache()     # what the step cached is not the next step's (the sessions' budgets)
    return _row(name, status, reason, time.monotonic() - t0, ctx.budget_s, summary, _plain(figures),
                rss_bytes=process_rss(), device_peak_bytes=peak)


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:400] if text else type(exc).__name__


def _plain(value):
    """Figures as JSON can hold them (floats cut to six significant digits)."""
    if isinstance(value, float):
        return float(f"{value:.6g}")
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return str(value)


# ---- the table -------------------------------------------------------------------------------------------

def markdown(doc: dict) -> str:
    """The document as a short Markdown page: one line of context, then one table row per step."""
    kind = "dry run on the CPU" if doc["dry_run"] else f"on {doc['device'] or 'an unknown device'}"
    lines = [f"# Device check ({kind})", "",
             f"{doc['started']}: {doc['status']}, {doc['seconds']:.0f} s of a {doc['budget_s']:.0f} s budget; "
             f"{len(doc['ok'])} ok, {len(doc['failed'])} failed, {len(doc['skipped'])} skipped.", "",
             "| step | status | s | figures | reason |", "|---|---|---:|---|---|"]
    for r in doc["steps"]:
        cells = [r["name"], r["status"], f"{r['seconds']:.1f}", r["summary"] or "", r["reason"] or ""]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(child_main(json.loads(sys.argv[1])))
