"""Shared pytest fixtures. The layer harness itself lives in ``tests/harness.py``
(``from harness import check_layer``; pytest puts ``tests/`` on ``sys.path``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import rnnkit as rk

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:  # so `import harness` works whatever the import mode
    sys.path.insert(0, str(TESTS))

#: the test data folder (fixtures written by the scripts in tools/)
DATA = TESTS / "data"

#: The kernel-sensitive test files, marked ``isa``: the compiled kernels, the losses, the int8
#: products, and every comparison of a fast path with its reference or with PyTorch / Keras /
#: onnxruntime. CI runs them a second time on the AVX2 code path of every library
#: (``tools/avx2.sh python -m pytest -q -m isa``), whatever the CPU it has.
ISA_SENSITIVE = frozenset({
    # the compiled kernels against the NumPy reference, and the layers' fast paths
    "test_kernels.py", "test_kernels_compile.py", "test_kernels_gates.py", "test_kernels_infer.py",
    "test_kernels_ksplit.py", "test_kernels_one_version.py", "test_kernels_pairs.py",
    "test_kernels_plans.py", "test_kernels_pool.py", "test_kernels_quick.py", "test_kernels_rows.py",
    "test_kernels_threads.py", "test_kernels_whole.py", "test_user_cells.py", "test_cell_forms.py",
    "test_dense_product.py",
    "test_dense_wide.py", "test_dense_lm.py", "test_predict_path.py", "test_sequences.py",
    "test_bidirectional.py", "test_input_grad.py", "test_recurrent_gradients.py", "test_rnn_layer.py",
    "test_masking_layers.py", "test_stacked_cells.py",
    # losses and gradient norms
    "test_losses.py", "test_losses_fused.py", "test_clip_norms.py", "test_sample_weights.py",
    "test_pinball.py", "test_deepar_likelihood.py",
    # the stateful one-step network against the whole-sequence one (DeepAR sampling)
    "test_deepar.py",
    # int8
    "test_quant.py", "test_quant_files.py",
    # against PyTorch, Keras and onnxruntime
    "test_recurrent_torch.py", "test_recurrent_fixtures.py", "test_cells.py", "test_rnn_net.py",
    "test_rnn_net_on_layers.py",
    "test_rnn_in_sequential.py", "test_min_cells.py", "test_torch_biases.py", "test_torch_files.py",
    "test_io_interop.py",
    "test_keras_parity.py", "test_keras_sequences.py", "test_keras_files.py", "test_functional_keras.py",
    "test_keras_export.py", "test_keras_seq_export.py", "test_keras_compile_import.py",
    "test_onnx_export.py", "test_onnx_seq_layers.py", "test_onnx_scan.py", "test_optimizer_formulas.py",
    "test_optimizers.py", "test_weight_tying.py", "test_models_programs.py", "test_porting_examples.py",
    "test_regularizers.py", "test_grad_accumulation.py", "test_keras_weight_order.py",
    # automatic gradients: the ops' VJPs and layers on the tape, against torch autograd
    "test_ops_grad.py", "test_tape_layers.py",
    # xLSTM against torch autograd (its Dense and BLAS products under the model paths)
    "test_xlstm.py",
    # the shape layers and wrappers against Keras on torch and onnxruntime
    "test_shape_layers.py",
    # ConvLSTM1D / ConvLSTM2D (packed products) against Keras on torch
    "test_conv_lstm.py",
    # ConvLSTM1D / ConvLSTM2D stepped against their whole-sequence pass
    "test_conv_lstm_stream.py",
    # the default forecaster (LSTM + AR highway) against PyTorch and the least-squares AR model
    "test_highway.py",
    # the WebSocket's batched fast-path steps against the general path and the whole-sequence predict
    "test_serve_ws_pool.py",
    # the WebSocket steps answered inside the protocol against the app's and the whole-sequence predict
    "test_serve_ws_fast.py",
    # the check that the AVX2 run is one
    "test_isa_path.py",
})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test of :data:`ISA_SENSITIVE` ``isa``."""
    for item in items:
        if item.path.name in ISA_SENSITIVE:
            item.add_marker(pytest.mark.isa)

try:  # property tests (tests/test_fuzz.py): a small profile by default, a long one on request
    from hypothesis import settings as _hyp_settings

    _hyp_settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True,
                                   print_blob=True)
    _hyp_settings.register_profile("long", max_examples=10000, deadline=None, print_blob=True)
    _hyp_settings.load_profile(os.environ.get("RNNKIT_FUZZ", "ci"))
except ImportError:  # hypothesis is in the test extra; without it test_fuzz.py skips
    pass


@pytest.fixture
def rng() -> np.random.Generator:
    """A fresh, seeded generator per test."""
    return np.random.default_rng(1234)


@pytest.fixture(autouse=True)
def _no_global_seed_leak() -> Iterator[None]:
    """A test that sets the global seed does not leak it into the next test."""
    yield
    rk.set_global_seed(None)
