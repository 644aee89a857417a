// DeviceInputs' kernels compiled for the host emulation (see emu.h).
#include "reference/gpu_oracle/input_kernels.cu"
