"""What a kernel costs without running it on a GPU: compiles for sm_80/sm_90 (nvrtc, cuda_wheels),
registers, shared memory and spills (resources), occupancy, the machine code's census (sass) and the loads
its warps keep in flight (loads_in_flight), the device table (gpus), the performance model (model, traffic/),
its what-ifs (sensitivity) and its check against published measurements (model_check)."""
