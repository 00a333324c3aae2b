"""Put this folder first on PYTHONPATH to run Python as if the optional packages were not
installed: importing torch, keras, h5py, matplotlib, tensorflow, onnx or onnxruntime raises
ModuleNotFoundError."""

import sys

BLOCKED = ("torch", "keras", "h5py", "matplotlib", "tensorflow", "onnx", "onnxruntime")


class _Blocker:
    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked for this test)", name=name)
        return None


sys.meta_path.insert(0, _Blocker())
