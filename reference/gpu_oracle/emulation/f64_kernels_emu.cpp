// The GPU oracle's fp64 kernels compiled for the host emulation (see emu.h).
#include "reference/gpu_oracle/f64_kernels.cu"
