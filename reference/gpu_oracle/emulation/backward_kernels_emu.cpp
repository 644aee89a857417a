// The GPU backward oracle's kernels compiled for the host emulation (see emu.h).
#include "reference/gpu_oracle/backward_kernels.cu"
