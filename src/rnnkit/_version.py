"""The version of rnnkit (one place; the package and the file writers read it)."""

__version__ = "0.1.0"
