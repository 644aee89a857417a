// The GPU forward replica's kernels compiled for the host emulation (see emu.h).
#include "reference/gpu_oracle/replica_forward_kernels.cu"
