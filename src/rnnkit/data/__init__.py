"""Data for ``fit`` / ``evaluate`` / ``predict`` that need not sit in memory at once:

- :class:`Dataset` — batches by index (Keras' ``PyDataset``): ``__len__``, ``__getitem__``,
  ``on_epoch_end``;
- :func:`windows` — forecasting windows read lazily from an array or a memory map;
- :func:`bucket_by_length` — variable-length sequences batched by length, lengths attached;
- :func:`timeseries_dataset` — Keras' ``timeseries_dataset_from_array``, as a Dataset;
- :func:`pad_sequences` — Keras' ``pad_sequences``: a list of sequences as one padded array.

``fit`` also takes any Python iterable / generator of ``(x, y)`` or ``(x, y, sample_weight)``
batches.
"""

from rnnkit._errors import DataSourceError
from rnnkit.data._buckets import Buckets, bucket_by_length
from rnnkit.data._dataset import Dataset
from rnnkit.data._pad import pad_sequences
from rnnkit.data._timeseries import TimeseriesDataset, timeseries_dataset
from rnnkit.data._windows import Windows, windows

__all__ = ["Buckets", "DataSourceError", "Dataset", "TimeseriesDataset", "Windows", "bucket_by_length",
           "pad_sequences", "timeseries_dataset", "windows"]
