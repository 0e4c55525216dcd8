import os
import sys

# The shared program builders (cuda_programs.py) sit beside the tests.
sys.path.insert(0, os.path.dirname(__file__))
