import os
import sys

# Tests import the project from this checkout, even when an installed copy exists.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
