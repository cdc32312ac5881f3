"""Every ``worldpager bench`` figure names the machine that made it: the CPU's model and its vector
extensions (AVX2, AVX-512, AMX, NEON, from /proc/cpuinfo's flags) in the JSON line's ``machine`` and in a
``machine:`` line printed just above it."""
from __future__ import annotations

import json

from click.testing import CliRunner

from engine.bench.machine import cpu_name, cpu_vectors, machine, machine_line
from worldpager_cli.main import cli

X86 = ["processor\t: 0", "vendor_id\t: GenuineIntel", "model\t\t: 143",
       "model name\t: Intel(R) Xeon(R) Platinum 8480+",
       "flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512bw avx512_bf16 avx512_vnni amx_bf16 amx_tile amx_int8"]
OLD_X86 = ["model name\t: Intel(R) Core(TM) i5-2500 CPU @ 3.30GHz", "flags\t\t: fpu sse4_2 avx"]
ARM = ["processor\t: 0", "BogoMIPS\t: 243.75", "Features\t: fp asimd evtstrm aes sve sve2", "CPU part\t: 0xd4f",
       "Model\t\t: Raspberry Pi 5 Model B Rev 1.0"]


def test_the_vector_extensions_come_from_the_flags():
    assert cpu_vectors(X86) == ["AVX2", "AVX-512", "AVX-512-BF16", "AVX-512-VNNI", "AMX", "AMX-BF16"]
    assert cpu_vectors(OLD_X86) == [] and cpu_vectors([]) == []
    assert cpu_vectors(ARM) == ["NEON", "SVE"]


def test_the_cpu_model_is_named_on_x86_and_arm():
    assert cpu_name(X86) == "Intel(R) Xeon(R) Platinum 8480+"   # "model name", not the "model" number
    assert cpu_name(ARM) == "Raspberry Pi 5 Model B Rev 1.0"
    assert cpu_name([])   # no /proc/cpuinfo: what platform knows


def test_the_machine_line_says_it_all():
    info = {"cpus": 2, "cpu": "AMD EPYC 7B13", "vectors": ["AVX2", "AVX-512"], "device": "cpu"}
    assert machine_line(info) == "machine: AMD EPYC 7B13, 2 CPUs, AVX2 AVX-512 (device cpu)"
    assert "no AVX2/AVX-512/AMX/NEON" in machine_line({**info, "vectors": []})


def test_a_bench_names_its_machine_in_the_json_and_above_it():
    result = CliRunner().invoke(cli, ["bench", "quant", "--preset", "micro", "--tokens", "8", "--repeats", "1",
                                      "--device", "cpu"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    *_, above, last = result.stdout.strip().splitlines()
    doc = json.loads(last)
    here = machine()
    assert doc["machine"]["cpu"] == here["cpu"] and doc["machine"]["vectors"] == here["vectors"]
    assert above == machine_line(doc["machine"]) and here["cpu"] in above
