"""Serving a model over HTTP: ``rnnkit serve MODEL`` or ``rnnkit.serve.app(model)``."""
