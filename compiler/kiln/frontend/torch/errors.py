"""Errors of the torch.export importer."""
from __future__ import annotations


class TorchImportError(ValueError):
    """A ``torch.export`` program Kiln cannot import. The message names the FX node, its target
    operator, where the node came from in the user's source (when torch recorded it) and what
    is unsupported."""


class Unsupported(Exception):
    """Raised by converters for something they do not support; the importer adds the node."""
