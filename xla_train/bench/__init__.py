"""Benchmarks, kept apart from training: each states its hardware and keeps warm-up outside the timed part."""
