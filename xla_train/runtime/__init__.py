"""Everything that knows about XLA, TPUs and GPUs; models, data, training and serving know none of it.

plan.py turns accelerator=/devices=/strategy= into a Trainer's hardware;
backend.py is what the rest of the package may ask of a device.
"""

import os as _os

# torch_xla picks a PJRT_DEVICE on its import unless told not to, and so whichever module imported it first would
# decide; runtime/probe.py's pjrt_device() decides instead, the same way whatever the import order.
_os.environ.setdefault("PJRT_SELECT_DEFAULT_DEVICE", "0")
