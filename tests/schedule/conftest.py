"""Fixtures for tests/schedule: defined in schedule_helpers.py, which tests also import helpers from
(a uniquely named module, so test folders can be collected together)."""
from schedule_helpers import *  # noqa: F401,F403
from schedule_helpers import elementwise_2d, matmul, vector_add  # noqa: F401  (fixtures)
