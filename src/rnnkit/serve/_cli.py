"""``rnnkit serve MODEL``: the server on uvicorn, its flags, and the app factory its worker
processes build (``--workers N``)."""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import sys
from dataclasses import asdict
from typing import Any

from rnnkit._errors import InvalidParameterError
from rnnkit.io import MissingDependencyError
from rnnkit.kernels import _threads as kernel_threads
from rnnkit.serve import app
from rnnkit.serve._limits import HEADER_TIMEOUT_ENV, ServeConfig, read_token_file

#: uvicorn's WebSocket implementations (its ``ws`` setting)
WS_IMPLEMENTATIONS = ("auto", "websockets-sansio", "websockets", "wsproto")

#: uvicorn's HTTP protocol for ``rnnkit serve``: its own, with a deadline on each request's head
HTTP_PROTOCOL = "rnnkit.serve._http:HeadTimeoutProtocol"

#: uvicorn's WebSocket protocol for a stream's messages answered in the protocol (``ws_fast_path``)
WS_PROTOCOL = "rnnkit.serve._wsconn:StreamWSProtocol"

#: the modules :data:`WS_PROTOCOL` builds on: uvicorn's ``websockets-sansio`` protocol (uvicorn
#: 0.35 and later) and the websockets package with its compiled frame unmasking; where one is
#: missing, streams go through uvicorn's own protocol and the app
WS_NEEDS = ("websockets", "websockets.speedups", "uvicorn.protocols.websockets.websockets_sansio_impl")

#: the environment variable through which ``--workers`` processes get the model and settings
CONFIG_ENV = "RNNKIT_SERVE_CONFIG"

_FLAGS: dict[str, tuple[type, str]] = {
    "max_wait_ms": (float, "how long the first request of a batch waits for others, in ms (0: no wait)"),
    "max_rows": (int, "the most rows (sequences x timesteps) per batched call; 1 turns batching off"),
    "max_body_bytes": (int, "the largest request body or WebSocket message, in bytes"),
    "max_timesteps": (int, "the most timesteps per request"),
    "max_batch": (int, "the most sequences per predict request"),
    "max_streams": (int, "the most streams open at once"),
    "max_queue_rows": (int, "rows waiting for the worker beyond which requests get 429"),
    "request_timeout_s": (float, "seconds a request may wait for the kernels before it gets 503 (it is "
                                 "then never computed)"),
    "stream_ttl_s": (float, "seconds without a step, read or WebSocket after which a stream is deleted"),
    "header_timeout_s": (float, "seconds a request's head (request line and headers) may take to arrive "
                                "(408 and the connection closed beyond)"),
    "body_timeout_s": (float, "seconds a request's body may take to arrive after its head (408 and the "
                              "connection closed beyond)"),
    "idle_timeout_s": (float, "seconds a kept-alive connection may sit idle between requests"),
}


def add_parser(sub: Any) -> None:
    """The ``serve`` subcommand's parser."""
    defaults = ServeConfig()
    s = sub.add_parser("serve", help="serve a model over HTTP: batched predict and stateful streams "
                                     "(needs rnnkit[serve])")
    s.add_argument("model", metavar="MODEL", help="a model file (rnnkit, .keras, or PyTorch LSTM/GRU "
                                                  "safetensors; told apart by content)")
    s.add_argument("--host", default="127.0.0.1", help="the address to bind (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8000, help="the port (default 8000)")
    s.add_argument("--token-file", default=None, metavar="FILE",
                   help="a file whose first line is the bearer token every request must carry")
    s.add_argument("--state-db", default=None, metavar="FILE",
                   help="persist the streams in this SQLite file (default: in memory, lost on exit)")
    s.add_argument("--synchronous", choices=("FULL", "NORMAL"), default=defaults.synchronous,
                   help="FULL: each commit reaches the disk (default); NORMAL: it survives a killed "
                        "process but not a power cut")
    s.add_argument("--workers", type=int, default=1,
                   help="worker processes sharing the port (>1: predict only, no streams)")
    s.add_argument("--kernel-threads", type=int, default=None, metavar="N",
                   help="threads per kernel call (default: $RNNKIT_KERNEL_THREADS, else 1: the event loop "
                        "and the kernels share the cores, and small batches lose more to a hand-over "
                        "between threads than they gain)")
    s.add_argument("--ws", default="auto", choices=WS_IMPLEMENTATIONS,
                   help="uvicorn's WebSocket implementation (default auto: websockets-sansio when the "
                        "websockets package is there, the leanest per message of them)")
    s.add_argument("--no-fast-path", action="store_true",
                   help="answer every request through the ASGI app, a small JSON predict too (by default "
                        "the HTTP protocol answers those itself, with the same bytes; for comparison)")
    s.add_argument("--no-ws-fast-path", action="store_true",
                   help="answer every WebSocket message through the ASGI app (by default the WebSocket "
                        "protocol answers a stream's messages itself, with the same bytes; for comparison)")
    s.add_argument("--access-log", action="store_true", help="log every request (off by default; "
                                                             "/metrics counts them)")
    s.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"),
                   help="uvicorn's log level (default info)")
    for name, (cast, text) in _FLAGS.items():
        s.add_argument("--" + name.replace("_", "-"), type=cast, default=getattr(defaults, name),
                       help=f"{text} (default {getattr(defaults, name)})")


def ws_protocol(ws: str, cfg: ServeConfig) -> str:
    """uvicorn's ``ws`` setting for ``--ws ws`` under ``cfg``: :data:`WS_PROTOCOL` (the
    ``websockets-sansio`` protocol answering a stream's messages itself) when ``ws_fast_path``
    is on, ``ws`` names that protocol or ``auto`` picks it, and every module of :data:`WS_NEEDS`
    is there; else ``ws`` as it is."""
    if cfg.ws_fast_path and ws in ("auto", "websockets-sansio") and all(_found(m) for m in WS_NEEDS):
        return WS_PROTOCOL
    return ws


def _found(module: str) -> bool:
    """Whether ``module`` can be imported (its parent packages are imported to look)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


def config_from(args: argparse.Namespace) -> ServeConfig:
    """The :class:`ServeConfig` of parsed ``serve`` flags."""
    token = None if args.token_file is None else read_token_file(args.token_file)
    if args.workers < 1:
        raise InvalidParameterError(f"--workers must be >= 1, got {args.workers}")
    if args.workers > 1 and args.state_db is not None:
        raise InvalidParameterError("--workers > 1 serves predict only (a stream lives in one process); "
                                    "drop --state-db, or run one server per port for streams")
    return ServeConfig(token=token, state_db=args.state_db, synchronous=args.synchronous,
                       streams=args.workers == 1, fast_path=not args.no_fast_path,
                       ws_fast_path=not args.no_ws_fast_path,
                       **{n: getattr(args, n) for n in _FLAGS})


def settle() -> None:
    """Move every object alive now (the libraries, the model, the app: some 10^5 objects) out of
    the garbage collector's sight (``gc.freeze``). A full collection walks them all, which takes
    tens to hundreds of milliseconds, and stalls every request in flight while it runs: the tail
    of the server's latency. Called once the app is built, before it serves."""
    gc.collect()
    gc.freeze()


def factory() -> Any:
    """The app of one ``--workers`` process (model path and settings from :data:`CONFIG_ENV`)."""
    spec = json.loads(os.environ[CONFIG_ENV])
    application = app(spec["model"], ServeConfig(**spec["config"]))
    settle()
    return application


def set_kernel_threads(n: int) -> None:
    """Run the batched kernel calls of this process (and of the worker processes it starts) on
    at most ``n`` threads. The kernels read ``RNNKIT_KERNEL_THREADS`` when rnnkit is imported,
    which the command line has done already, so the count they use is set here too."""
    os.environ["RNNKIT_KERNEL_THREADS"] = str(n)
    kernel_threads.CORES = kernel_threads._usable_cores()


def serve_command(args: argparse.Namespace) -> int:
    """Run the server until interrupted; returns the exit status."""
    try:
        import uvicorn
    except ImportError as e:
        raise MissingDependencyError(f"rnnkit serve needs uvicorn ({e}); "
                                     f"pip install 'rnnkit[serve]'") from None
    cfg = config_from(args)
    if args.kernel_threads is not None and args.kernel_threads < 1:
        raise InvalidParameterError(f"--kernel-threads must be >= 1, got {args.kernel_threads}")
    if args.kernel_threads is not None or "RNNKIT_KERNEL_THREADS" not in os.environ:
        set_kernel_threads(args.kernel_threads or 1)
    if args.host not in ("127.0.0.1", "localhost", "::1") and cfg.token is None:
        print(f"rnnkit serve: warning: binding {args.host} without --token-file: anyone who can reach "
              f"it can use the model", file=sys.stderr)
    os.environ[HEADER_TIMEOUT_ENV] = repr(cfg.header_timeout_s)  # read by each connection's protocol
    opts: dict[str, Any] = {"host": args.host, "port": args.port, "log_level": args.log_level,
                            "ws_max_size": cfg.max_body_bytes, "ws_per_message_deflate": False,
                            "timeout_graceful_shutdown": 5, "ws": ws_protocol(args.ws, cfg),
                            "access_log": args.access_log, "http": HTTP_PROTOCOL,
                            "timeout_keep_alive": cfg.idle_timeout_s}
    if args.workers > 1:
        os.environ[CONFIG_ENV] = json.dumps({"model": os.path.abspath(args.model), "config": asdict(cfg)})
        uvicorn.run("rnnkit.serve._cli:factory", factory=True, workers=args.workers, **opts)
        return 0
    application = app(args.model, cfg)
    where = cfg.state_db if cfg.state_db is not None else \
        "memory only (lost on exit; --state-db FILE keeps them)"
    print(f"rnnkit serve: {args.model} on http://{args.host}:{args.port}; streams: {where}", file=sys.stderr,
          flush=True)
    settle()
    uvicorn.run(application, **opts)
    return 0


__all__ = ["CONFIG_ENV", "WS_PROTOCOL", "add_parser", "config_from", "factory", "serve_command",
           "set_kernel_threads", "settle", "ws_protocol"]
