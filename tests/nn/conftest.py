"""Fixtures for tests/nn: defined in nn_helpers.py, which tests also import helpers from
(a uniquely named module, so test folders can be collected together)."""
from nn_helpers import *  # noqa: F401,F403
