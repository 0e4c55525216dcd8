"""``kiln.nd``: creating runtime arrays."""

from .ndarray import NDArray, array, empty, from_dlpack

__all__ = ["NDArray", "array", "empty", "from_dlpack"]
