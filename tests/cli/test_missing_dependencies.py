"""A third-party module a command imports when it runs, absent: one ``worldpager: error:`` line naming the
pip command, exit 1, no traceback and no output — for ``batch --ray`` (Ray) and the LingBot models'
text encoder (transformers); and ``worldpager doctor`` lists each such module with its pip line (a core
one missing: not ready, exit 1; an extra's: a warning). Each runs in a subprocess whose import system
refuses the module as it refuses an uninstalled package (``missing_module_support``), with a bounded wait.
"""
from __future__ import annotations

import json
import subprocess

from lingbot_release_support import write_release
from missing_module_support import without

TIMEOUT_S = 300   # a hang guard only
SYNTHETIC = ["--model", "synthetic", "--chunk-ms", "5", "--kv-scale", "0.034", "--pool-slots", "4", "--kv-bits", "16"]


def _run(cmd, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_S)


def _one_line(result: subprocess.CompletedProcess, *needles: str) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 1, result.stderr
    assert len(lines) == 1 and lines[0].startswith("worldpager: error: "), result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_batch_ray_without_ray_names_the_pip_line(tmp_path):
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text(json.dumps({"name": "a"}) + "\n")
    result = _run(without("ray") + ["batch", jobs, "--out-dir", tmp_path / "out", *SYNTHETIC, "--ray"], tmp_path)
    _one_line(result, "worldpager batch --ray needs the ray package, which is not installed",
              "pip install 'ray>=2.9'", "worldpager[ray]")
    assert not (tmp_path / "out").exists()


def test_a_lingbot_model_without_transformers_names_the_pip_line(tmp_path):
    release = write_release(tmp_path / "release")
    out = tmp_path / "out" / "x.mp4"
    out.parent.mkdir()
    result = _run(without("transformers") + ["generate", "--model", "lingbot-tiny", "--chunks", "2", "--quiet",
                                             "--checkpoint", release, "--prompt", "a street", "--out", out], tmp_path)
    _one_line(result, "text encoder needs the transformers package, which is not installed",
              "pip install 'transformers>=4.40'", "worldpager[lingbot]")
    assert list(out.parent.iterdir()) == []


def _doctor(tmp_path, *hidden: str):
    result = _run(without(*hidden) + ["doctor", "--spill", tmp_path], tmp_path)
    report = json.loads(result.stdout.strip().splitlines()[-1])
    return result, report, {c["name"]: c for c in report["checks"]}


def test_doctor_without_aiohttp_is_not_ready_and_names_the_pip_line(tmp_path):
    result, report, checks = _doctor(tmp_path, "aiohttp")
    assert result.returncode == 1 and not report["ready"], result.stderr
    assert checks["aiohttp"]["status"] == "missing" and "worldpager play" in checks["aiohttp"]["found"]
    assert "pip install 'aiohttp>=3.9'" in checks["aiohttp"]["advice"]
    assert "pip install 'aiohttp>=3.9'" in result.stderr and "not ready" in result.stderr.splitlines()[-1]


def test_doctor_without_the_extras_warns_and_is_still_ready(tmp_path):
    result, report, checks = _doctor(tmp_path, "ray", "transformers")
    assert result.returncode == 0 and report["ready"], result.stderr
    assert checks["ray"]["status"] == "warn" and "pip install 'ray>=2.9'" in checks["ray"]["advice"]
    assert checks["transformers"]["status"] == "warn"
    assert "pip install 'transformers>=4.40'" in checks["transformers"]["advice"]
    assert checks["aiohttp"]["status"] == "ok"
