"""Everything that knows about XLA, TPUs and GPUs; models, data, training and serving know none of it.

registry.py resolves accelerator= and runtime= into a runtime's folder (torch_xla/, jax/, eager/); plan.py turns the
settings into a Trainer's hardware by asking it; backend.py is what the rest of the package may ask of a device.
"""

import os as _os

# torch_xla picks a PJRT_DEVICE on its import unless told not to, and so whichever module imported it first would
# decide; runtime/probe.py's xla_platform() decides instead, the same way whatever the import order.
_os.environ.setdefault("PJRT_SELECT_DEFAULT_DEVICE", "0")
