"""The compile settings of a ``.keras`` file (``config.json``'s ``compile_config``) as rnnkit's.

Keras 3 records ``model.compile(optimizer, loss, metrics)`` as serialized objects. What maps::

    Keras optimizer        SGD, Adam, AdamW, RMSprop -> the rnnkit class with formula="keras"
                           (Keras' update equations) and the file's learning_rate, momentum,
                           nesterov, beta_1, beta_2, epsilon, rho, centered, weight_decay
                           (AdamW), clipnorm, clipvalue, global_clipnorm
    Keras loss             a name or MeanSquaredError, MeanAbsoluteError, BinaryCrossentropy,
                           CategoricalCrossentropy, SparseCategoricalCrossentropy (from_logits)
    Keras metrics          the names rnnkit.metrics.get knows; others are left out (warned)

Settings rnnkit would not reproduce exactly -- another optimizer class, a learning-rate
schedule, ``amsgrad``, ``use_ema``, ``weight_decay`` outside AdamW, loss scaling, gradient
accumulation, label smoothing, a reduction other than the mean, per-output losses or
``loss_weights`` -- leave the model uncompiled with a warning naming the setting, so that a
``fit`` can never silently train differently from Keras.
"""

from __future__ import annotations

import warnings
from typing import Any

from rnnkit import losses, metrics, optimizers
from rnnkit._errors import Error

_OPTIMIZERS: dict[str, tuple[Any, tuple[str, ...]]] = {
    "SGD": (optimizers.SGD, ("momentum", "nesterov")),
    "Adam": (optimizers.Adam, ("beta_1", "beta_2", "epsilon")),
    "AdamW": (optimizers.AdamW, ("beta_1", "beta_2", "epsilon", "weight_decay")),
    "RMSprop": (optimizers.RMSprop, ("rho", "momentum", "epsilon", "centered")),
}
#: Keras' constructor defaults where they differ from rnnkit's
_KERAS_DEFAULTS: dict[str, dict[str, Any]] = {"AdamW": {"weight_decay": 0.004}}
_CLIP = ("clipnorm", "clipvalue", "global_clipnorm")
#: Keras optimizer options that must hold these values (anything else is not reproduced)
_NEUTRAL: dict[str, Any] = {"use_ema": False, "amsgrad": False, "loss_scale_factor": None,
                            "gradient_accumulation_steps": None}
_LOSS_NEUTRAL: dict[str, Any] = {"label_smoothing": 0.0, "reduction": "sum_over_batch_size", "axis": -1}


class _Skip(Exception):
    """A compile setting rnnkit does not reproduce (the message names it)."""


def _optimizer(entry: Any) -> optimizers.Optimizer:
    if isinstance(entry, str):
        entry = {"class_name": {k.lower(): k for k in _OPTIMIZERS}.get(entry.lower(), entry), "config": {}}
    if not isinstance(entry, dict) or not isinstance(entry.get("config", {}), dict):
        raise _Skip(f"the optimizer entry {str(entry)[:100]!r} is not a serialized Keras optimizer")
    name, cfg = str(entry.get("class_name")), dict(entry.get("config") or {})
    if name not in _OPTIMIZERS:
        raise _Skip(f"optimizer {name!r} (rnnkit has {sorted(_OPTIMIZERS)})")
    cls, own = _OPTIMIZERS[name]
    for key, neutral in _NEUTRAL.items():
        if cfg.get(key, neutral) != neutral:
            raise _Skip(f"optimizer {name} with {key}={cfg[key]!r}")
    if name != "AdamW" and cfg.get("weight_decay") is not None:
        raise _Skip(f"optimizer {name} with weight_decay={cfg['weight_decay']!r} (rnnkit decays "
                    f"weights only in AdamW)")
    lr = cfg.get("learning_rate", 0.001 if name != "SGD" else 0.01)
    if not isinstance(lr, (int, float)) or isinstance(lr, bool):
        raise _Skip(f"optimizer {name} with the learning-rate schedule {str(lr)[:100]} (use an rnnkit "
                    f"scheduler callback)")
    kw: dict[str, Any] = dict(_KERAS_DEFAULTS.get(name, {}))
    kw.update({k: cfg[k] for k in (*own, *_CLIP) if cfg.get(k) is not None})
    opt: optimizers.Optimizer = cls(learning_rate=lr, formula="keras", **kw)
    return opt


def _loss(entry: Any) -> losses.Loss:
    if isinstance(entry, str):
        return losses.get(entry)
    if not isinstance(entry, dict) or not isinstance(entry.get("config", {}), dict):
        raise _Skip(f"the loss {str(entry)[:100]!r} (one loss for the model's one output is imported)")
    name, cfg = str(entry.get("class_name")), dict(entry.get("config") or {})
    for key, neutral in _LOSS_NEUTRAL.items():
        if cfg.get(key, neutral) != neutral:
            raise _Skip(f"loss {name} with {key}={cfg[key]!r}")
    config = {"from_logits": True} if cfg.get("from_logits") else {}
    return losses.deserialize({"class_name": name, "config": config})


def compile_from_keras(model: Any, top: dict[str, Any], source: str) -> None:
    """Compile ``model`` as ``top["compile_config"]`` says (see the module doc); nothing when the
    file records no compile, a warning naming the setting when one is not reproduced."""
    comp = top.get("compile_config")
    if not isinstance(comp, dict) or comp.get("optimizer") is None:
        return
    try:
        if comp.get("loss_weights") is not None:
            raise _Skip(f"loss_weights={comp['loss_weights']!r}")
        opt = _optimizer(comp["optimizer"])
        loss = _loss(comp.get("loss"))
    except (_Skip, Error) as e:
        warnings.warn(f"{source}: the model is left uncompiled, rnnkit does not reproduce Keras' {e}; "
                      f"call model.compile(...) yourself", UserWarning, stacklevel=3)
        return
    kept, left = [], []
    listed = comp.get("metrics") or []
    for m in listed if isinstance(listed, list) else [listed]:
        try:
            kept.append(metrics.get(m))
        except (Error, TypeError):
            left.append(m)
    if left:
        warnings.warn(f"{source}: Keras metrics {left!r} have no rnnkit counterpart and are left out",
                      UserWarning, stacklevel=3)
    model.compile(opt, loss, kept)
