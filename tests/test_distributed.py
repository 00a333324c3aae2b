"""``rnnkit.distributed``: data-parallel fit over MPI, run as a user runs it — ``mpiexec -n 2``
on this machine (loopback) — against single-process runs in this process.

The MPI tests skip when mpi4py or an ``mpiexec`` is missing (the ``test`` extra installs both:
mpi4py and the MPICH wheel). The worker program is ``tests/mpi_worker.py``; every run writes
into ``tmp_path``. No test asserts a duration other than the 30 s bound that proves no hang.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from mpi_worker import CASES

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
WORKER = TESTS / "mpi_worker.py"
#: a job that should end at once must end within this (generous: on a cold Numba cache each rank
#: first compiles the kernels it uses, ~20-30 s when two ranks share 2 cores)
NO_HANG_S = 120


def find_mpiexec() -> str | None:
    """The mpiexec beside this Python (where the MPICH wheel puts it), else on PATH."""
    here = Path(sys.executable).parent / "mpiexec"
    return str(here) if here.exists() else shutil.which("mpiexec")


MPIEXEC = find_mpiexec()
needs_mpi = pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None or MPIEXEC is None,
                               reason="needs mpi4py and mpiexec (pip install rnnkit[mpi])")


def env() -> dict[str, str]:
    """This checkout's src first on PYTHONPATH; one thread per rank; Open MPI allowed as root."""
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *filter(None, [e.get("PYTHONPATH")])])
    e.update(RNNKIT_KERNEL_THREADS="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
             OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
             OMPI_MCA_rmaps_base_oversubscribe="1")
    return e


def mpirun(n: int, args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``mpiexec -n N args`` in its own process group; past ``timeout`` the whole group (the
    ranks too) is killed and the test fails with what the ranks had written."""
    assert MPIEXEC is not None
    cmd = [MPIEXEC, "-n", str(n), *args]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd, env=env(),
                         stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        ranks = "".join(f"\n--- {f.name}:\n{f.read_text()}" for f in sorted(cwd.glob("stderr.*")))
        pytest.fail(f"{' '.join(cmd)} still ran after {timeout} s\n--- stdout:\n{out}\n"
                    f"--- stderr:\n{err}{ranks}")
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def worker(n: int, mode: str, out: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return mpirun(n, [sys.executable, str(WORKER), mode, str(out)], out, timeout)


def max_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    assert len(a) == len(b)
    return max(float(np.max(np.abs(np.asarray(u, np.float64) - np.asarray(v, np.float64))))
               for u, v in zip(a, b, strict=True))


# -- two processes equal one ------------------------------------------------------------------
@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One ``mpiexec -n 2`` run of every training case; what each rank wrote."""
    if importlib.util.find_spec("mpi4py") is None or MPIEXEC is None:
        pytest.skip("needs mpi4py and mpiexec (pip install rnnkit[mpi])")
    out = tmp_path_factory.mktemp("mpi_equal")
    proc = worker(2, "equal", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr + "".join(
        p.read_text() for p in out.glob("stderr.*"))
    return {"out": out, "npz": [dict(np.load(out / f"rank{r}.npz")) for r in range(2)],
            "json": [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]}


def rank_weights(two: dict[str, Any], rank: int, case: str) -> list[np.ndarray]:
    npz = two["npz"][rank]
    return [npz[f"{case}/{k}"] for k in range(sum(key.startswith(f"{case}/") for key in npz))]


@needs_mpi
@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_two_ranks_equal_one_process(two_ranks: dict[str, Any], case: str) -> None:
    import mpi_worker as w

    _, dt, opt, bs = next(c for c in w.CASES if c[0] == case)
    ref = w.build(dt, opt)
    hist = w.fit_case(ref, dt, bs)
    tol = 1e-12 if dt == "float64" else 1e-6
    got = rank_weights(two_ranks, 0, case)
    assert max_diff(got, ref.get_weights()) <= tol
    assert max_diff(ref.get_weights(), w.build(dt, opt).build((None, 6, 3)).get_weights()) > 0.01  # trained
    rep = two_ranks["json"][0][case]
    for key in ("loss", "mae", "val_loss", "val_mae", "learning_rate"):
        np.testing.assert_allclose(rep["history"][key], hist.history[key], rtol=10 * tol, atol=0)
    assert rep["lr"] == ref.optimizer.learning_rate == 0.5 * (0.02 if opt == "adam" else 0.1)
    x, y = w.data(dt)
    want = ref.evaluate(x, y, batch_size=4, return_dict=True)
    assert isinstance(want, dict)
    for key, v in want.items():
        assert rep["evaluate"][key] == pytest.approx(v, rel=10 * tol, abs=0)


@needs_mpi
def test_ranks_end_bit_identical(two_ranks: dict[str, Any]) -> None:
    a, b = two_ranks["npz"]
    assert sorted(a) == sorted(b) and len(a) > 20
    for key in a:
        assert a[key].tobytes() == b[key].tobytes(), key
    assert two_ranks["json"][0] == two_ranks["json"][1]  # histories, evaluate results, learning rates


@needs_mpi
def test_early_stopping_stops_every_rank_and_callbacks_run_on_rank_0(two_ranks: dict[str, Any]) -> None:
    import mpi_worker as w

    ref, hist = w.stop_case()
    rep = two_ranks["json"][1]["stop"]       # rank 1 returns rank 0's History
    assert rep["epochs"] == hist.epoch == [0, 1]
    np.testing.assert_allclose(rep["history"]["val_loss"], hist.history["val_loss"], rtol=1e-12)
    assert max_diff(rank_weights(two_ranks, 1, "stop"), ref.get_weights()) <= 1e-12
    assert (two_ranks["out"] / "callback_ranks.txt").read_text().split() == ["0", "0"]


@needs_mpi
def test_local_shards_full_batch_equal_one_process(two_ranks: dict[str, Any]) -> None:
    import mpi_worker as w

    ref = w.local_case()
    assert max_diff(rank_weights(two_ranks, 0, "local"), ref.get_weights()) <= 1e-12
    assert max_diff(rank_weights(two_ranks, 1, "local"), ref.get_weights()) <= 1e-12


@needs_mpi
def test_local_shards_evaluate_over_all_samples(two_ranks: dict[str, Any]) -> None:
    import mpi_worker as w

    ref = w.local_case()
    want = ref.evaluate(*w.data("float64"), return_dict=True)
    assert isinstance(want, dict) and set(want) == {"loss", "mae"}
    for rank in range(2):
        got = two_ranks["json"][rank]["local"]["evaluate"]
        assert got == pytest.approx(want, rel=1e-12, abs=0)


@needs_mpi
def test_seed_none_draws_the_batches_from_the_global_seed_as_one_process(two_ranks: dict[str, Any]) -> None:
    import mpi_worker as w

    ref = w.global_seed_case()
    assert max_diff(rank_weights(two_ranks, 1, "global_seed"), ref.get_weights()) <= 1e-12


@needs_mpi
def test_fit_starts_from_rank_0s_weights_and_optimizer_state(two_ranks: dict[str, Any]) -> None:
    import mpi_worker as w

    ref = w.resume_case()
    assert max_diff(rank_weights(two_ranks, 1, "resume"), ref.get_weights()) <= 1e-12


@needs_mpi
def test_stateful_layers_carry_each_ranks_rows_as_one_process(two_ranks: dict[str, Any]) -> None:
    import mpi_worker as w

    ref = w.stateful_case()
    assert max_diff(rank_weights(two_ranks, 1, "stateful"), ref.get_weights()) <= 1e-12


@needs_mpi
@pytest.mark.parametrize("seq", [True, False])
def test_masks_sample_weights_and_l2_equal_one_process(two_ranks: dict[str, Any], seq: bool) -> None:
    import mpi_worker as w

    ref = w.weighted_case(seq)
    for rank in range(2):
        assert max_diff(rank_weights(two_ranks, rank, f"weighted-{seq}"), ref.get_weights()) <= 1e-10
        got = two_ranks["json"][rank][f"weighted-{seq}"]
        assert set(got) == {"loss", "mae"}
        assert got["loss"] == pytest.approx(ref.evaluation["loss"], rel=1e-12, abs=0)
        if not seq:  # a metric is the parts' means weighted by their sizes: exact without a mask
            assert got["mae"] == pytest.approx(ref.evaluation["mae"], rel=1e-12, abs=0)


@needs_mpi
def test_graph_model_with_a_shared_layer_and_two_outputs(two_ranks: dict[str, Any]) -> None:
    import mpi_worker as w

    ref, hist = w.graph_case()
    assert max_diff(rank_weights(two_ranks, 1, "graph"), ref.get_weights()) <= 1e-12
    got = two_ranks["json"][1]["graph"]["history"]
    assert set(got) == {"loss", "output_0_mae", "output_1_mae"} == set(hist.history)
    for key, v in hist.history.items():
        np.testing.assert_allclose(got[key], v, rtol=1e-12, atol=0)


# -- failures ---------------------------------------------------------------------------------
@needs_mpi
def test_a_rank_that_raises_at_step_3_ends_the_job_naming_it_on_every_rank(tmp_path: Path) -> None:
    proc = worker(2, "raise", tmp_path, timeout=NO_HANG_S)
    assert proc.returncode != 0
    for r in range(2):
        err = (tmp_path / f"stderr.{r}").read_text()
        assert re.search(r"DistributedError: rnnkit\.distributed: rank 1 failed in fit: epoch 1/5, "
                         r"batch 3/5: ValueError: injected failure at step 3", err), (r, err)
    assert "finished" not in proc.stdout


@needs_mpi
def test_a_callback_that_raises_on_rank_0_ends_the_job_on_every_rank(tmp_path: Path) -> None:
    proc = worker(2, "callback", tmp_path, timeout=NO_HANG_S)
    assert proc.returncode != 0
    for r in range(2):
        err = (tmp_path / f"stderr.{r}").read_text()
        assert ("rnnkit.distributed: rank 0 failed in fit: callback on_train_batch_end: RuntimeError: "
                "injected callback failure") in err, (r, err)
    assert "finished" not in proc.stdout


@needs_mpi
def test_an_unguarded_error_aborts_the_job_naming_the_rank(tmp_path: Path) -> None:
    proc = worker(2, "abort", tmp_path, timeout=NO_HANG_S)
    assert proc.returncode != 0
    err = (tmp_path / "stderr.1").read_text()
    assert ("rnnkit.distributed: rank 1 failed: RuntimeError: injected allreduce failure at step 3; "
            "aborting all 2 ranks") in err
    assert "finished" not in proc.stdout


@needs_mpi
def test_a_rank_that_dies_ends_the_job(tmp_path: Path) -> None:
    """mpiexec ends the job when rank 1 exits; should it miss the death (MPICH 5.0.2's hydra did
    once in CI: no rank wrote anything and mpiexec still ran after 120 s), rank 0's
    collective times out after 30 s and aborts the job."""
    proc = worker(2, "die", tmp_path, timeout=NO_HANG_S)
    assert proc.returncode != 0
    assert "finished" not in proc.stdout


@needs_mpi
def test_a_rank_that_hangs_ends_the_job_after_the_timeout_naming_the_wait(tmp_path: Path) -> None:
    proc = worker(2, "stall", tmp_path, timeout=NO_HANG_S)
    assert proc.returncode != 0
    assert "finished" not in proc.stdout
    err0 = (tmp_path / "stderr.0").read_text()
    assert "rank 0 failed: TimeoutError: waited" in err0, err0
    assert "which the other ranks did not join (timeout=5 s)" in err0, err0
    waited = float(re.search(r"waited ([0-9.]+) s", err0).group(1))  # type: ignore[union-attr]
    assert 5.0 <= waited < 10.0, err0  # (polled every 0.5 ms; the slack is a busy machine's)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), True, "30"])
def test_a_timeout_that_is_not_a_positive_number_is_refused(bad: object) -> None:
    with pytest.raises(rk.InvalidParameterError, match=r"rnnkit.distributed.MPI: timeout .* got"):
        rk.distributed.MPI(timeout=bad)  # type: ignore[arg-type]


# -- the command line -------------------------------------------------------------------------
@needs_mpi
def test_cli_train_on_two_ranks_matches_one_process(tmp_path: Path) -> None:
    csv = str(rk.datasets.path("sunspots"))
    args = ["train", csv, "--target", "SUNACTIVITY", "--epochs", "2", "--units", "4", "--quiet",
            "--batch-size", "50", "--no-plots", "--backtest-windows", "0"]   # (a backtest: one process)
    one = subprocess.run([sys.executable, "-m", "rnnkit", *args, "--out", "one"], capture_output=True,
                         text=True, cwd=tmp_path, env=env(), timeout=300)
    assert one.returncode == 0, one.stderr
    two = mpirun(2, [sys.executable, "-m", "rnnkit", *args, "--out", "two", "--distributed", "mpi"], tmp_path)
    assert two.returncode == 0, two.stderr
    assert two.stdout.count("trained 2 epoch(s)") == 1              # rank 0 alone prints
    h1, h2 = ((tmp_path / d / "history.csv").read_text().splitlines() for d in ("one", "two"))
    assert h1[0] == h2[0] == "epoch,loss,val_loss" and len(h1) == len(h2) == 3
    for a, b in zip(h1[1:], h2[1:], strict=True):
        np.testing.assert_allclose([float(v) for v in a.split(",")], [float(v) for v in b.split(",")],
                                   rtol=1e-5)
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == [
        "checkpoint.safetensors", "history.csv", "metrics.json", "model.safetensors"]


@needs_mpi
def test_cli_error_on_every_rank_ends_the_job(tmp_path: Path) -> None:
    proc = mpirun(2, [sys.executable, "-m", "rnnkit", "train", "missing.csv", "--target", "y",
                      "--distributed", "mpi"], tmp_path, timeout=NO_HANG_S)
    assert proc.returncode == 2
    assert re.search(r"rnnkit: error: rank [01] failed: \w+Error: missing\.csv: no such file", proc.stderr)


# -- the docs page's example ------------------------------------------------------------------
def docs_train_py() -> str:
    text = (ROOT / "docs" / "distributed.md").read_text()
    blocks = [b for b in re.findall(r"^```py\n(.*?)^```$", text, re.S | re.M) if b.startswith("# train.py")]
    assert len(blocks) == 1
    return blocks[0]


@needs_mpi
def test_the_docs_two_process_example_runs(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(docs_train_py())
    proc = mpirun(2, [sys.executable, "train.py"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len([ln for ln in lines if ln.startswith("rank 0 of 2")]) == 1
    final = [ln for ln in lines if ln.startswith("final loss")]
    assert len(final) == 1 and float(final[0].split()[2]) < 0.1
    assert (tmp_path / "model.safetensors").exists()


# -- without MPI ------------------------------------------------------------------------------
def test_without_mpi4py_MPI_raises_MissingDependencyError_and_nothing_else_imports_it() -> None:
    code = """
import sys
sys.modules["mpi4py"] = None       # as if it were not installed: `import mpi4py` raises ImportError
import numpy as np
import rnnkit as rk
m = rk.Sequential([rk.LSTM(3, "tanh", seed=1), rk.Dense(1, "linear", seed=2)])
m.compile("sgd", "mse")
m.fit(np.ones((4, 2, 2)), np.ones((4, 1)), 1)
try:
    rk.distributed.MPI()
except rk.MissingDependencyError as e:
    assert isinstance(e, rk.Error)
    print("MissingDependencyError:", e)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(),
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "MissingDependencyError:" in proc.stdout and "pip install rnnkit[mpi]" in proc.stdout


def test_bad_arguments_are_typed_errors() -> None:
    m = rk.Sequential([rk.Dense(1, "linear", seed=1)])
    m.compile("sgd", "mse")
    x, y = np.ones((4, 2)), np.ones((4, 1))
    with pytest.raises(TypeError, match=r"distributed= must be an rnnkit\.distributed\.MPI .* got str"):
        m.fit(x, y, 1, distributed="mpi")
    with pytest.raises(TypeError, match=r"distributed= must be .* got int"):
        m.evaluate(x, y, distributed=1)
    with pytest.raises(TypeError, match="got dict"):
        m.fit_with_batches(x, y, 1, 2, distributed={})
    with pytest.raises(rk.InvalidParameterError,
                       match=r"shard must be one of \['replicated', 'local'\], got 'global'"):
        rk.distributed.MPI(shard="global")


def test_distributed_error_message_names_the_ranks() -> None:
    e = rk.distributed.DistributedError("fit", {1: "epoch 1/2, batch 3/4: ValueError: x"}, 0, 2)
    assert str(e) == ("rnnkit.distributed: rank 1 failed in fit: epoch 1/2, batch 3/4: ValueError: x "
                      "(raised on rank 0 of 2)")
    e2 = rk.distributed.DistributedError("fit", {0: "a", 2: "b"}, 1, 3)
    assert "ranks 0, 2 failed in fit: rank 0: a; rank 2: b" in str(e2) and isinstance(e2, rk.Error)
    e3 = rk.distributed.DistributedError("fit", {0: "same", 1: "same"}, 1, 2)
    assert "ranks 0, 1 failed in fit: same (raised" in str(e3)


@needs_mpi
def test_one_rank_mpi_in_a_plain_process_is_bit_identical_to_fit(tmp_path: Path) -> None:
    code = """
import numpy as np, rnnkit as rk, mpi_worker as w
a, b = w.build("float32", "adam"), w.build("float32", "adam")
w.fit_case(a, "float32", 7)
w.fit_case(b, "float32", 7, distributed=rk.distributed.MPI())
print(all(u.tobytes() == v.tobytes() for u, v in zip(a.get_weights(), b.get_weights())))
try:
    rk.distributed.MPI(comm=42)
except TypeError as e:
    print(e)
"""
    e = env()
    e["PYTHONPATH"] = os.pathsep.join([str(TESTS), e["PYTHONPATH"]])
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, timeout=120,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["True", "rnnkit.distributed.MPI: comm must be an mpi4py "
                                        "intra-communicator (e.g. MPI.COMM_WORLD), got int"]


@needs_mpi
def test_the_gradients_a_distributed_step_hands_the_optimizer_are_never_overwritten(tmp_path: Path) -> None:
    """An optimizer that keeps the gradients it was given (one keeping the previous step's, as
    Rprop does) finds them as they were: each step's summed gradients live in buffers of their
    own, not in ones the next step's allreduce writes again."""
    code = """
import numpy as np, rnnkit as rk, mpi_worker as w

class Keeper(rk.SGD):
    kept = []
    def apply_gradients(self, pairs):
        pairs = list(pairs)
        self.kept.append([(g, np.array(g)) for _, _, g in pairs])
        return super().apply_gradients(pairs)

model = w.build("float64", "sgd")
model.compile(Keeper(0.1), "mse")
x, y = w.data("float64")
model.fit(x, y, 1, batch_size=4, shuffle=False, distributed=rk.distributed.MPI())
print(len(Keeper.kept) > 1, all(np.array_equal(g, at) for step in Keeper.kept for g, at in step))
"""
    e = env()
    e["PYTHONPATH"] = os.pathsep.join([str(TESTS), e["PYTHONPATH"]])
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, timeout=120,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "True"]
