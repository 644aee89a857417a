// The element pass's kernels in a build without CUDA: nothing is ever resident on a device there
// (make_expected keeps nothing without the GPU oracle), so reaching these is a bug, said as one.
#include <stdexcept>

#include "verify/element_pass_kernels.h"

namespace flashcheck::element_pass_gpu {

void launch_max_ref(const double*, int64_t, double*) {
  throw std::logic_error("element pass on the device: flashcheck was built without CUDA");
}
void launch_chunks(const PassArgs&, Mode, ElementTotals*) {
  throw std::logic_error("element pass on the device: flashcheck was built without CUDA");
}

}  // namespace flashcheck::element_pass_gpu
