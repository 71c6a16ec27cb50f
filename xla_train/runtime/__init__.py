"""Everything that knows about XLA, TPUs and GPUs; models, data, training and serving know none of it.

plan.py turns accelerator=/devices=/strategy= into a Trainer's hardware;
backend.py is what the rest of the package may ask of a device.
"""
