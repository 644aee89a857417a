// The element pass's kernels compiled for reference/'s host emulation of CUDA (gpu_oracle/emulation/emu.h).
#include "verify/element_pass_kernels.cu"
