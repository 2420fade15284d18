import os
import sys

import torch

# Triton kernels run on CPU only in interpreter mode, which must be set before triton is imported;
# on a CUDA machine the kernels run for real.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, os.path.dirname(__file__))  # tests import their fakes as a plain module
