import os
import sys

# Triton kernels run on CPU only in interpreter mode, which must be set before triton is imported.
os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, os.path.dirname(__file__))  # tests import their fakes as a plain module
