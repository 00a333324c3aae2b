"""DeepAR's calibration rules compared on the same fits: which one brings the 80 % intervals of
the held-out rows nearest 80 %.

    python benchmarks/bench_deepar_rules.py DIR PANEL.csv SEED [--out results.jsonl]
                                            [--employment-series 20] [--epochs 40]

One panel and one seed a process (the panels of ``bench_deepar.py``, the same horizons; each
series' last ``horizon`` rows held out). Every network trains as ``DeepAR(horizon, seed=SEED)``
trains (patience 5 on its own last ``horizon`` rows): the final model on the history, and
calibration models ``m_j`` (``j`` = 0, 2, 3; 1 too with ``--rule-c``) on the history without
its last ``horizon + j s`` rows (``s = ceil(horizon / 4)``). Window ``j`` is the ``horizon``
rows that end ``j s`` rows before the history's end, so ``m_j`` trained up to its origin. The rules, each
giving per-step or pooled conformal factors (``conformal_spread``) applied to the final model's
raw forecast of the held-out rows (medians unchanged):

(a) ``m_3`` scores windows 3, 2, 1, 0 (the default before: K = 4 rolling origins);
(b) ``m_0`` scores window 0 (one window: the last ``horizon`` rows);
(c) ``m_j`` scores window ``j`` (each window by a model trained up to its origin; K = 4; only
    with ``--rule-c``: ``m_1`` is trained for it alone);
(d) ``m_2`` scores windows 2 and 0 (K = 2, step ``ceil(horizon / 2)``);
(f) the final model scores window 0 (no second model: with patience the final model's weights
    never trained on the history's last ``horizon`` rows, which chose its epoch; added after
    seed 0 showed the final model's raw coverage of the held-out rows far from the calibration
    models');
(e) ``m_3`` on windows 3 .. 0, but the likelihood's scale ``sigma`` is multiplied by the factor
    (found by bisection in log space) that makes the windows' pooled 80 % coverage 80 %; the
    final model's paths are then sampled with that ``sigma`` (each draw is fed back as a lag,
    so the median moves: its MASE is reported).

Writes one JSON line: every rule's coverage of the held-out rows, its factors, the raw coverage
of each model on its windows and on the held-out rows, the final model's MASE.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from rnnkit.io import DeepAR
from rnnkit.io._deepar import _network
from rnnkit.timeseries._backtest import mase
from rnnkit.timeseries._deepar import Forecast, conformal_scores, conformal_spread, sample_paths, spread_paths
from rnnkit.timeseries._likelihood import softplus
from rnnkit.timeseries._panel import Panel, read_panel

HORIZONS = {"panel_aus_arrivals_q.csv": 8, "panel_aus_accommodation_q.csv": 8,
            "panel_us_employment_m.csv": 12}
LEVEL = 0.8


def window(history: Panel, horizon: int, offset: int) -> tuple[Panel, Panel]:
    """(before, actual): the ``horizon`` rows ending ``offset`` rows before the history's end."""
    return (history.split(offset)[0] if offset else history).split(horizon)


def scaled_forecast(model: DeepAR, data: Panel, future: Panel | None, seed: int, c: float) -> Forecast:
    """The model's raw forecast with the likelihood's ``sigma`` multiplied by ``c``."""
    spec, net = model._fitted()
    spec = dataclasses.replace(spec, spread=())
    stepper = _network(spec, stateful=True)
    stepper.set_weights(net.get_weights())

    def step(x: np.ndarray) -> np.ndarray:
        raw = np.array(stepper.predict(x, batch_size=len(x)), dtype=np.float64)
        sp = c * softplus(raw[..., 1])
        raw[..., 1] = sp + np.log(-np.expm1(-sp))  # softplus^-1
        return raw

    return sample_paths(spec, data, (step, stepper.reset_states), 200, seed, future)


def actual_of(p: Panel) -> np.ndarray:
    return np.stack([s.y for s in p.series])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("panel")
    ap.add_argument("seed", type=int)
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--employment-series", type=int, default=20)
    ap.add_argument("--out", default=None)
    ap.add_argument("--rule-c", action="store_true", help="also rule (c): one more training (m_1)")
    args = ap.parse_args(argv)
    H = HORIZONS[args.panel]
    panel = read_panel(Path(args.dir) / args.panel)
    if "employment" in args.panel:
        panel = Panel(panel.series[:args.employment_series], panel.covariate_names, panel.freq)
    history, held = panel.split(H)
    cov = bool(panel.covariate_names)
    s = -(-H // 4)
    seed = args.seed
    t0 = time.perf_counter()

    final = DeepAR(H, epochs=args.epochs, seed=seed, calibration=None).fit(history)

    def fit(p: Panel) -> DeepAR:
        # as DeepAR.fit trains its calibration model: the final model's settings (the covariates
        # standardised over the whole history), on fewer rows
        m = DeepAR(H, epochs=args.epochs, seed=seed, calibration=None)
        m.network, m.history = m._train(final.spec, p, 0)  # type: ignore[arg-type]
        m.spec = final.spec
        return m

    models = {j: fit(history.split(H + j * s)[0]) for j in range(4) if j != 1 or args.rule_c}
    fit_s = time.perf_counter() - t0

    def fc_of(m: DeepAR, before: Panel, after: Panel, c: float | None = None) -> Forecast:
        fut = after if cov else None
        if c is None:
            return m.forecast(before, num_samples=200, seed=seed, future=fut, calibrated=False)
        return scaled_forecast(m, before, fut, seed, c)

    ya = actual_of(held)
    final_fc = fc_of(final, history, held)
    med = final_fc.quantile(0.5)
    out: dict[str, Any] = {
        "panel": args.panel, "seed": seed, "series": len(panel), "horizon": H,
        "mase": float(np.mean([mase(ya[i], med[i], history.series[i].y, history.season)
                               for i in range(len(history))])),
        "final_raw_heldout": final_fc.coverage(ya, LEVEL)}
    # each calibration model's scores and raw coverage on every window j (0 .. 3), and on the held-out rows
    scores: dict[tuple[int | str, int], np.ndarray] = {}
    for j, m in models.items():
        out[f"m{j}_raw_heldout"] = fc_of(m, history, held).coverage(ya, LEVEL)
        for w in range(j + 1):
            before, after = window(history, H, w * s)
            fc = fc_of(m, before, after)
            scores[j, w] = conformal_scores(fc, actual_of(after), LEVEL)
            out[f"m{j}_raw_w{w}"] = fc.coverage(actual_of(after), LEVEL)
    before, after = window(history, H, 0)
    fc = fc_of(final, before, after)
    scores["final", 0] = conformal_scores(fc, actual_of(after), LEVEL)
    out["mfinal_raw_w0"] = fc.coverage(actual_of(after), LEVEL)
    rules = {"a": [(3, w) for w in (3, 2, 1, 0)], "b": [(0, 0)], "c": [(w, w) for w in (3, 2, 1, 0)],
             "d": [(2, 2), (2, 0)], "f": [("final", 0)]}
    if not args.rule_c:
        del rules["c"]
    for name, keys in rules.items():
        c, per_step = conformal_spread(np.concatenate([scores[k] for k in keys]), LEVEL)
        paths = spread_paths(final_fc.samples, c)
        cal = Forecast(final_fc.ids, final_fc.index, paths)
        out[name] = {"coverage": cal.coverage(ya, LEVEL), "factors": list(c), "per_step": per_step,
                     "raw_cal": float(np.mean([out[f"m{j}_raw_w{w}"] for j, w in keys]))}
    # (e): the likelihood's sigma scaled so that m_3 covers 80 % of its windows' points

    def cal_cov(c: float) -> float:
        inside = []
        for w in (3, 2, 1, 0):
            before, after = window(history, H, w * s)
            lo, hi = fc_of(models[3], before, after, c).interval(LEVEL)
            a = actual_of(after)
            inside.append((a >= lo) & (a <= hi))
        return float(np.mean(inside))

    lo_c, hi_c = np.log(0.1), np.log(10.0)
    for _ in range(8):
        mid = 0.5 * (lo_c + hi_c)
        if cal_cov(float(np.exp(mid))) < LEVEL:
            lo_c = mid
        else:
            hi_c = mid
    ce = float(np.exp(hi_c))
    efc = fc_of(final, history, held, ce)
    out["e"] = {"coverage": efc.coverage(ya, LEVEL), "factors": [ce], "raw_cal": cal_cov(1.0),
                "cal_coverage_at_factor": cal_cov(ce),
                "mase": float(np.mean([mase(ya[i], efc.quantile(0.5)[i], history.series[i].y, history.season)
                                       for i in range(len(history))]))}
    out["fit_seconds"] = fit_s
    out["seconds"] = time.perf_counter() - t0
    line = json.dumps(out)
    print(line)
    if args.out:
        with open(args.out, "a") as f:
            f.write(line + "\n")
    print({k: (v["coverage"] if isinstance(v, dict) else v) for k, v in out.items()}, file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
