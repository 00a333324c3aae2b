"""A global DeepAR-style model over a panel against per-series models of the same kind.

    python benchmarks/bench_deepar.py DIR [--epochs 40] [--samples 200] [--seeds 0,1,2]
                                          [--employment-series 20] [--panels A.csv,B.csv]
                                          [--patience 5] [--likelihood student_t]
                                          [--calibration conformal|none]

DIR holds long-format panels (``unique_id,ds,y`` and covariate columns): the files read, when
present, are ``panel_aus_arrivals_q.csv`` (horizon 8), ``panel_aus_accommodation_q.csv``
(horizon 8; its covariates taken as known future) and ``panel_us_employment_m.csv`` (horizon 12;
its first ``--employment-series`` series; 0: skipped). Each series' last ``horizon`` rows are held out. The
global model trains on every series' history at once; each per-series model, with the same
settings and epochs, on one series. Scores on the held-out rows: mean MASE of the median
forecast (scaled by the in-sample seasonal-naive MAE, as M4) and the share of held-out values
inside the 80 % intervals (the 0.1 and 0.9 quantiles of the sample paths), as sampled ("raw")
and after the model's conformal calibration (a second model, trained without the rows before the
held-out ones that the 4 rolling-origin calibration windows cover, forecasts those windows; the
median of the final model, and so the MASE, is the same either way); with it the binomial standard error
of a coverage measured on that many points, ``sqrt(0.8 x 0.2 / points)``; seasonal naive's
MASE for reference. Every number is a mean over the seeds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from rnnkit.io import DeepAR
from rnnkit.timeseries._backtest import mase
from rnnkit.timeseries._panel import Panel, read_panel

PANELS = (("panel_aus_arrivals_q.csv", 8), ("panel_aus_accommodation_q.csv", 8),
          ("panel_us_employment_m.csv", 12))


def score(model: DeepAR, history: Panel, held: Panel, samples: int,
          seed: int) -> tuple[list[float], float, float]:
    """MASE of the median per series, calibrated and raw 80 % coverage."""
    future = held if held.covariate_names else None
    fc = model.forecast(history, num_samples=samples, seed=seed, future=future)
    raw = model.forecast(history, num_samples=samples, seed=seed, future=future, calibrated=False)
    actual = np.stack([s.y for s in held.series])
    med = fc.quantile(0.5)
    m = [mase(actual[i], med[i], history.series[i].y, history.season) for i in range(len(history))]
    return m, fc.coverage(actual, 0.8), raw.coverage(actual, 0.8)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--employment-series", type=int, default=20)
    ap.add_argument("--likelihood", default="student_t")
    ap.add_argument("--patience", type=int, default=5,
                    help="early stopping on each series' last window; 0: off")
    ap.add_argument("--calibration", default="conformal", choices=("conformal", "none"))
    ap.add_argument("--panels", default=",".join(n for n, _ in PANELS),
                    help="the files to read, comma-separated")
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = []
    for name, horizon in PANELS:
        path = Path(args.dir) / name
        if name not in args.panels.split(","):
            continue
        if not path.is_file():
            print(f"skipped {name}: not in {args.dir}", file=sys.stderr)
            continue
        if "employment" in name and args.employment_series == 0:
            continue
        panel = read_panel(path)
        if "employment" in name:
            panel = Panel(panel.series[:args.employment_series], panel.covariate_names, panel.freq)
        history, held = panel.split(horizon)
        snaive = np.mean([mase(h.y, s.y[-history.season:][np.arange(horizon) % history.season]
                               if history.season else np.full(horizon, s.y[-1]), s.y, history.season)
                          for s, h in zip(history.series, held.series, strict=True)])
        res: dict[str, list[tuple[float, float, float, float]]] = {"global": [], "per-series": []}
        cal = None if args.calibration == "none" else args.calibration
        for seed in seeds:
            kw = dict(epochs=args.epochs, likelihood=args.likelihood, seed=seed, patience=args.patience,
                      calibration=cal)
            t0 = time.perf_counter()
            g = DeepAR(horizon, **kw).fit(history)  # type: ignore[arg-type]
            m, cov, raw = score(g, history, held, args.samples, seed)
            res["global"].append((float(np.mean(m)), raw, cov, time.perf_counter() - t0))
            t0 = time.perf_counter()
            ms, inside, inside_raw = [], [], []
            for s, h in zip(history.series, held.series, strict=True):
                one = Panel((s,), history.covariate_names, history.freq)
                oneh = Panel((h,), held.covariate_names, held.freq)
                p = DeepAR(horizon, **kw).fit(one)  # type: ignore[arg-type]
                mm, cc, rr = score(p, one, oneh, args.samples, seed)
                ms += mm
                inside.append(cc)
                inside_raw.append(rr)
            res["per-series"].append((float(np.mean(ms)), float(np.mean(inside_raw)), float(np.mean(inside)),
                                      time.perf_counter() - t0))
        points = len(panel) * horizon * len(seeds)
        for kind, r in res.items():
            a = np.array(r)
            rows.append((name, len(panel), horizon, kind, a[:, 0].mean(), a[:, 1].mean(), a[:, 2].mean(),
                         float(np.sqrt(0.16 / points)), a[:, 3].mean(), snaive))
            print(rows[-1], file=sys.stderr, flush=True)
    print("| panel | series | horizon | model | mean MASE | 80% coverage raw | calibrated | +- (1 s.e.) "
          "| seconds | seasonal naive MASE |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row[0]} | {row[1]} | {row[2]} | {row[3]} | {row[4]:.3f} | {100 * row[5]:.1f} % "
              f"| {100 * row[6]:.1f} % | {100 * row[7]:.1f} | {row[8]:.0f} | {row[9]:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
