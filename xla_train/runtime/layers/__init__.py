"""Layer rewrites: the modules a runtime swaps into a net while XLA runs it (scans for RNNs, max pooling as a
reduction, hashed dropout, the weight gradient in its own shape), each undone when the net goes back to the CPU."""
