"""Memory traffic of a kernel launch counted on the CPU, under Nsight Compute's metric names."""
