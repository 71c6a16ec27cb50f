"""The generators of docs/results.md's blocks, one file per subject; tools/results.py names each block's function."""
