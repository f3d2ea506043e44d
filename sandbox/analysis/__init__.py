"""What a kernel costs without running it on a GPU: compiles for sm_80/sm_90 (nvrtc, ptx_link, cuda_wheels),
registers, shared memory and spills (resources), occupancy, the machine code's census (sass), memory traffic
(traffic) and the GPU model (model, gpus). Its modules sit in several layers (docs/design.md): the toolchains
and the device table low, the counting core and the model above the families, the drivers above them."""
