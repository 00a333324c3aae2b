"""Every non-public piece of Numba (and of llvmlite, the LLVM binding Numba pins) that rnnkit
uses, imported here and nowhere else in the package.

Numba's public API (``numba.njit``, ``numba.types``, ``numba.extending``: ``intrinsic``,
``overload``, ``register_model``, ``models``, ``unbox``, ``NativeValue``; ``numba.typeof``,
``numba.cfunc``) is imported where it is used. What is below is not public: a Numba release may
rename or change it, so ``pyproject.toml`` bounds ``numba`` above to the releases tested, and
tests/test_numba_private.py checks each entry of :data:`USES` (that it exists, with the parameters
rnnkit passes), so that a Numba that changes one fails there, naming it, instead of deep inside a
compile. A module that needs something new of these adds it here and to :data:`USES`.

- ``numba.core.cgutils``, ``numba.core.imputils``: LLVM IR helpers for the intrinsics (the
  micro-kernels, the step call, the spin wait, the int8 GEMM).
- ``numba.core.caching``: the file-backed cache locators (:mod:`._cache` keys the on-disk cache
  on every kernel source) and the index-and-data cache file (:mod:`._cache` locks its saves).
- ``numba.core.config``: the CPU name and features Numba compiles for (:mod:`._isa`).
- ``numba.core.event``: compile and compiler-lock events (the compile announcement and timer,
  :mod:`._gcpause`).
- ``llvmlite.ir``, ``llvmlite.binding``: the IR the intrinsics emit; the host CPU, symbols for
  the packed GEMM's callbacks.
"""

from __future__ import annotations

import llvmlite.binding as llvm
from llvmlite import ir
from numba.core import caching, cgutils, config, event
from numba.core.imputils import impl_ret_borrowed, impl_ret_untracked

#: ``{module: {name: the parameters rnnkit passes, in order, or None (not a call: a class,
#: a method rnnkit overrides or calls, an attribute)}}``: every use, one entry each
USES: dict[str, dict[str, tuple[str, ...] | None]] = {
    "numba.core.cgutils": {
        "get_or_insert_function": ("module", "fnty", "name"),
        "unpack_tuple": ("builder", "tup", "count"),
        "get_null_value": ("ltype",),
        "pointer_add": ("builder", "ptr", "offset"),
        "for_range": ("builder", "count"),
        "alloca_once_value": ("builder", "value"),
    },
    "numba.core.imputils": {
        "impl_ret_borrowed": ("ctx", "builder", "retty", "ret"),
        "impl_ret_untracked": ("ctx", "builder", "retty", "ret"),
    },
    "numba.core.caching": {
        "CacheImpl._locator_classes": None,          # the list rnnkit puts its keyed locators in
        "UserProvidedCacheLocator.from_function": ("py_func", "py_file"),
        "UserProvidedCacheLocator.get_source_stamp": None,
        "UserProvidedCacheLocator._py_file": None,   # (set by the constructor: checked on an instance)
        "InTreeCacheLocator.from_function": ("py_func", "py_file"),
        "UserWideCacheLocator.from_function": ("py_func", "py_file"),
        "IndexDataCacheFile": None,                  # the class rnnkit replaces with a locked save
        "IndexDataCacheFile._load_index": ("self",),
        "IndexDataCacheFile._save_index": ("self", "overloads"),
        "IndexDataCacheFile._save_data": ("self", "name", "data"),
        "IndexDataCacheFile._data_name": ("self", "number"),
        "IndexDataCacheFile._index_path": None,      # (set by the constructor: checked on an instance)
    },
    "numba.core.config": {
        "CPU_NAME": None,
        "CPU_FEATURES": None,
    },
    "numba.core.event": {
        "Listener.on_start": None,
        "Listener.on_end": None,
        "register": ("kind", "listener"),
        "_builtin_kinds": None,                      # holds "numba:compile", "numba:compiler_lock"
    },
    "llvmlite.binding": {
        "get_host_cpu_name": (),
        "get_host_cpu_features": (),
        "add_symbol": ("name", "address"),
    },
    "llvmlite.ir": {n: None for n in ("Constant", "IntType", "FloatType", "DoubleType", "VoidType",
                                      "VectorType", "FunctionType", "IRBuilder", "CallInstr", "Undefined")},
}

__all__ = ["USES", "caching", "cgutils", "config", "event", "impl_ret_borrowed", "impl_ret_untracked", "ir",
           "llvm"]
