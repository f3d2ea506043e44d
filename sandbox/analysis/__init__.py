"""What a kernel costs without running it on a GPU: compiles for sm_80/sm_90 (nvrtc, ptx_link, cuda_wheels),
registers, shared memory and spills (resources), occupancy, the machine code's census (sass) and the loads
its warps keep in flight (loads_in_flight), memory traffic (traffic), the device table (gpus), the performance
model (model), its what-ifs (sensitivity) and its check against published measurements (model_check). Its
modules sit in several layers (docs/design.md): the toolchains and the device table low, the counting core and
the model above the families, the drivers above them."""
