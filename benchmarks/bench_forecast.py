"""The default forecaster against every baseline on real series: ``rnnkit train`` with a
rolling-origin backtest on each single series of a directory, and the per-series MASE table.

    python benchmarks/bench_forecast.py DIR [--windows 3] [--preprocess auto] [--out RESULTS]
                                            [--max-rows 2000] [--only NAME,...]

``DIR`` holds CSV files of one series each, ``date,value`` (files whose header is not that, e.g.
long-format panels ``unique_id,ds,y``, are skipped and listed). For each series the command run
is ``rnnkit train FILE --target value --backtest-windows K --horizon H --preprocess auto`` with
every other setting at its default (``--train-args`` adds more); ``H`` is the season
(``--season``'s rule: the dates' calendar cycle, else the autocorrelation rule), at most 24, and 8
without a season. A series longer than
``--max-rows`` is cut to its last ``--max-rows`` rows (stated in the table). The script prints,
per series, the MASE of the network and of every baseline and the network's rank, then the mean
MASE of each forecaster over the series and whether the network is at or below the best
baseline's mean; it writes every number to ``RESULTS/forecast-<UTC time>.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from rnnkit.cli import main
from rnnkit.timeseries import detect_season, read_csv, read_header, season_of


def horizon_for(season: int | None) -> int:
    return min(season, 24) if season and season > 1 else 8


def run_one(path: Path, windows: int, preprocess: str, max_rows: int, work: Path,
            extra: list[str]) -> dict[str, object]:
    table = read_csv(path, ["value"])
    y = table.columns["value"]
    cut = len(y) > max_rows
    if cut:
        src = work / path.name
        lines = path.read_text().splitlines()
        src.write_text("\n".join([lines[0], *lines[-max_rows:]]) + "\n")
        table = read_csv(src, ["value"])
        y = table.columns["value"]
        path = src
    season = detect_season(y, season_of(table.index, table.index_kind))
    h = horizon_for(season)
    out = work / (path.stem + "_out")
    buf = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(buf):
        rc = main(["train", str(path), "--target", "value", "--backtest-windows", str(windows),
                   "--horizon", str(h), "--preprocess", preprocess, "--quiet", "--no-plots",
                   "--out", str(out), *extra])
    secs = time.perf_counter() - t0
    if rc != 0:
        return {"series": path.name, "error": f"rnnkit train exited {rc}", "log": buf.getvalue()}
    m = json.loads((out / "metrics.json").read_text())
    bt = m["backtest"]
    return {"series": path.name, "rows": len(y), "cut": cut, "season": season, "horizon": h,
            "preprocess": m["preprocess"], "network": bt["network"], "best": bt["best"],
            "mase": {("network" if r["name"] == bt["network"] else r["name"]): r["mase"]
                     for r in bt["ranking"]},
            "seconds": round(secs, 1)}


def main_(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--windows", type=int, default=3)
    ap.add_argument("--preprocess", choices=("none", "auto"), default="auto")
    ap.add_argument("--max-rows", type=int, default=2000)
    ap.add_argument("--only", default=None, help="comma-separated file names to run")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    ap.add_argument("--train-args", default="", help="more rnnkit train arguments, e.g. '--window 24'")
    a = ap.parse_args(argv)
    files = sorted(a.dir.glob("*.csv"))
    if a.only:
        keep = set(a.only.split(","))
        files = [f for f in files if f.name in keep]
    skipped = [f.name for f in files if list(read_header(f))[:2] != ["date", "value"]]
    files = [f for f in files if f.name not in skipped]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for f in files:
            r = run_one(f, a.windows, a.preprocess, a.max_rows, Path(tmp), a.train_args.split())
            results.append(r)
            if "error" in r:
                print(f"{f.name}: {r['error']}", file=sys.stderr)
                continue
            mase = r["mase"]
            assert isinstance(mase, dict)
            rank = sorted(mase, key=mase.get).index("network") + 1
            pp = r["preprocess"]
            assert isinstance(pp, dict)
            steps = (("log", pp.get("log")), (f"s{pp.get('seasonal')}", pp.get("seasonal")),
                     ("diff", pp["difference"]))
            how = "+".join([k for k, on in steps if on]) or "lvl"
            print(f"{f.name:<32} H={r['horizon']:<3} {how:<12} "
                  f"rank {rank}/{len(mase)}  " + "  ".join(f"{k}={v:.3f}" for k, v in sorted(mase.items())),
                  flush=True)
    ok = [r for r in results if "error" not in r]
    if not ok:
        print("no series ran", file=sys.stderr)
        return 1
    names = sorted({k for r in ok for k in r["mase"]})  # type: ignore[union-attr]
    means = {k: float(np.mean([r["mase"][k] for r in ok if k in r["mase"]])) for k in names}  # type: ignore[index,operator]
    best_base = min((k for k in names if k != "network"), key=means.__getitem__)
    order = sorted(means.items(), key=lambda kv: kv[1])
    print(f"\nmean MASE over {len(ok)} series: " + "  ".join(f"{k}={v:.3f}" for k, v in order))
    firsts = sum(1 for r in ok if min(r["mase"], key=r["mase"].get) == "network")  # type: ignore[union-attr,arg-type]
    print(f"network ranks first on {firsts} of {len(ok)}; its mean MASE {means['network']:.3f} vs the best "
          f"baseline's ({best_base}) {means[best_base]:.3f}: "
          + ("at or below" if means["network"] <= means[best_base] else "ABOVE"))
    if skipped:
        print("skipped (not date,value):", ", ".join(skipped))
    a.out.mkdir(parents=True, exist_ok=True)
    dest = a.out / f"forecast-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    dest.write_text(json.dumps({"windows": a.windows, "preprocess": a.preprocess,
                                "train_args": a.train_args, "results": results,
                                "mean_mase": means}, indent=1))
    print(f"wrote {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main_())
