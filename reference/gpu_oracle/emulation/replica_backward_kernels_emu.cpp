// The GPU backward replica's kernels compiled for the host emulation (see emu.h).
#include "reference/gpu_oracle/replica_backward_kernels.cu"
