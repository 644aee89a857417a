// The GPU baseline's kernels compiled for the host emulation (see emu.h).
#include "reference/gpu_oracle/baseline_kernels.cu"
