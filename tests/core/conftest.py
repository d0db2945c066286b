import os
import sys

# the tests import core_helpers.py from this folder (pytest runs with --import-mode=importlib)
sys.path.insert(0, os.path.dirname(__file__))
