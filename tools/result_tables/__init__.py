"""The generators of the blocks of docs/results.md and the README, one file per subject, each with its tables and its
headline claims; tools/results.py names each block's function."""
