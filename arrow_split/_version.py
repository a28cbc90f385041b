"""The package's version, in one place: read by the build backend, written into dumps."""

__all__ = ["__version__"]

__version__ = "0.3.0"
