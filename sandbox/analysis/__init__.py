"""What a kernel costs without running it on a GPU: compiles for sm_80/sm_90 (nvrtc, cuda_wheels),
registers, shared memory and spills (resources), occupancy, and the machine code's census (sass)."""
