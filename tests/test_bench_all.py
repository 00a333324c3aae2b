"""``benchmarks/bench.py --markdown`` of a ``--all`` results file: a small hand-written run, and
the rows its tables must print, each value checked (nothing is timed here)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from file_modules import load


def _peers(isa: str, rk_ort: float, rk_t: float, rk_t8: float) -> dict[str, Any]:
    return {"rows": [{"case": "lstm", "shape": "S2", "threads": 1, "isa": isa, "rnnkit_s": 1e-3,
                      "onnxruntime_s": 2e-3, "torch_s": 2e-3, "torch_int8_s": 3e-3,
                      "rnnkit_over_onnxruntime": rk_ort, "rnnkit_over_torch": rk_t,
                      "rnnkit_over_torch_int8": rk_t8}], "others_cores": {"1": 0.5}}


def _train(isa: str, rk: float, t: float) -> dict[str, Any]:
    return {"meta": {"isa": {"requested": isa}},
            "rows": [{"cell": "gru", "shape": "S3", "rnnkit_s": rk, "torch_s": t, "ratio": rk / t}]}


def _sec(isas: list[str], data: Any, load: tuple[float, float] = (1.5, 2.25)) -> dict[str, Any]:
    return {"isas": isas, "loadavg_start": load[0], "loadavg_end": load[1], "wall_s": 12.4,
            "data": data, "error": None}


RUN: dict[str, Any] = {
    "kind": "all", "argv": ["--all", "--quick", "--isa", "both"], "quick": True, "isas": ["native", "avx2"],
    "date_utc": "2026-12-08T01:00:00+00:00", "cpu": "Test CPU 9000", "cores": 2, "host_isa": "AVX-512",
    "versions": {"rnnkit": "0.1"}, "loadavg_start": 1.0, "loadavg_end": 3.0, "wall_s": 600.0,
    "sections": {
        "inference": _sec(["native", "avx2"], {"native": _peers("AVX-512", 0.5, 0.75, 1.25),
                                                "avx2": _peers("AVX2", 0.625, 0.875, 1.5)}),
        "training": _sec(["native", "avx2"], {"runs": [_train("native", 2e-3, 4e-3),
                                                        _train("avx2", 3e-3, 4e-3)]}),
        "int8": _sec(["native", "avx2"], {"cell": "lstm", "rows": [
            {"shape": "S2", "isa": "native", "layout": "vnni", "rk_int8_ms": 0.5, "rk_f32/rk_int8": 2.0,
             "torch_int8/rk_int8": 4.0, "err_rk_int8": 0.0123, "err_torch_int8": 0.025},
            {"shape": "S2", "isa": "avx2", "layout": "avx2", "rk_int8_ms": 0.8, "rk_f32/rk_int8": 1.25,
             "torch_int8/rk_int8": 2.5, "err_rk_int8": 0.0123, "err_torch_int8": 0.025}]}),
        "first_use": _sec(["native"], {"native": {
            "own_cache": True, "compile_s": 3.25, "compile_cpu_s": 2.5,
            "rows": [{"config": "lstm", "dtype": "float32", "same_bits": None, "empty": None,
                      "installed": {"import": 0.5, "first": 1.25, "cpu": 1.5, "compiled": 0,
                                    "loaded": 41}}]}}),
        "serving": _sec(["native"], {"native": {
            "http": {"clients": 100, "seconds": 3.0, "rounds": 1, "model_predict_rows_per_s_batch32": 5000,
                     "medians": [{"phase": "keepalive", "server": "fast", "requests_per_s": 2500.4,
                                  "p50_ms": 10.0, "p99_ms": 40.26, "server_cpu_us_per_request": 310.2,
                                  "load_average_1m": 2.0}]},
            "ws": {"streams": 100, "seconds": 3.0, "ws_fast_path": True, "steps_per_s": 9000,
                   "p99_ms": 21.04, "server_cpu_us_per_step": 95.4}}}),
    },
}


def _markdown(tmp_path: Path, run: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> list[str]:
    bench = load("bench_all_under_test", "benchmarks/bench.py")
    path = tmp_path / "all.json"
    path.write_text(json.dumps(run))
    assert bench.main(["--markdown", str(path)]) == 0
    return capsys.readouterr().out.splitlines()


def test_markdown_of_an_all_run_prints_every_sections_rows(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    lines = _markdown(tmp_path, RUN, capsys)
    machine = ("Machine: Test CPU 9000 (2 cores, AVX-512); kernels ran on: AVX-512 (native), AVX2; "
               "load average 1.50 at start, 2.25 at end; 12 s.")
    assert lines.count(machine) == 3                        # the sections run on both ISAs
    assert lines.count("Machine: Test CPU 9000 (2 cores, AVX-512); kernels ran on: AVX-512 (native); "
                       "load average 1.50 at start, 2.25 at end; 12 s.") == 2
    # inference: rnnkit / onnxruntime, / PyTorch, / PyTorch int8 per ISA, side by side
    assert "| lstm | S2 | 1 | 0.50 | 0.75 | 1.25 | 0.62 | 0.88 | 1.50 |" in lines
    assert ("onnxruntime has no ISA switch: it runs on the host's ISA in every column group. Cores the "
            "machine's other processes used meanwhile: native 1 thread 0.5; avx2 1 thread 0.5.") in lines
    # training: the times in ms and their ratio per ISA
    assert "| gru | S3 | 2.000 ms | 4.000 ms | 0.50 | 3.000 ms | 4.000 ms | 0.75 |" in lines
    # int8: int8 / float32 and int8 / PyTorch int8 are the inverses of the stored ratios
    assert ("| S2 | vnni | 0.500 ms | 0.50 | 0.25 | 1.2e-02 | 2.5e-02 | avx2 | 0.800 ms | 0.80 | 0.40 "
            "| 1.2e-02 | 2.5e-02 |") in lines
    # first use: import + first on the installed cache; the empty-cache columns absent (--quick)
    assert "| lstm | float32 | 1.75 | 1.50 | 0 | 41 |" in lines
    assert not any("empty cache s" in ln for ln in lines)
    # serving: HTTP requests/s, p99 and CPU a request; WebSocket steps/s, p99 and CPU a step
    assert "| HTTP keepalive | fast | 2500 requests | 40.3 | 310 |" in lines
    assert "| WebSocket steps | fast path | 9000 steps | 21.0 | 95 |" in lines


def test_markdown_of_an_all_run_names_a_section_that_failed(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    run = json.loads(json.dumps(RUN))
    run["sections"]["int8"].update(data={}, error="bench_int8.py (avx2) exited with status 1")
    lines = _markdown(tmp_path, run, capsys)
    assert "Not measured: bench_int8.py (avx2) exited with status 1" in lines
    assert not any(ln.startswith("| S2 |") for ln in lines)
    assert "| lstm | S2 | 1 | 0.50 | 0.75 | 1.25 | 0.62 | 0.88 | 1.50 |" in lines


def test_markdown_of_an_all_run_warns_when_the_avx2_restriction_did_not_take_effect(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = json.loads(json.dumps(RUN))
    run["sections"]["inference"]["data"]["avx2"]["rows"][0]["isa"] = "AVX-512"
    run["sections"]["training"]["data"]["runs"][1]["meta"]["isa"]["restrictions_not_in_effect"] = ["numba"]
    run["sections"]["int8"]["data"]["rows"][1]["layout"] = "vnni"
    lines = _markdown(tmp_path, run, capsys)
    assert "WARNING: the ISA asked for did not take effect: avx2 run compiled for AVX-512." in lines
    assert "WARNING: the ISA asked for did not take effect: avx2 run: numba not restricted." in lines
    assert "WARNING: the ISA asked for did not take effect: avx2 run used the vnni product at S2." in lines
    assert not any(ln.startswith("WARNING") for ln in _markdown(tmp_path, RUN, capsys))
