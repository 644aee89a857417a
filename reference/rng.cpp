// Compiled with -ffp-contract=off (see CMakeLists): a fused multiply-add on one machine and not on
// another would change the normals' last bits and with them the golden inputs.
#include "reference/rng.h"

#include <cmath>

namespace flashcheck {

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = uint64_t{M0} * c[0];
    uint64_t p1 = uint64_t{M1} * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
    k[0] += W0;
    k[1] += W1;
  }
  return c;
}

std::array<uint32_t, 4> CounterRng::block(uint64_t index, uint32_t attempt) const {
  return philox4x32({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                     static_cast<uint32_t>(stream_), attempt ^ static_cast<uint32_t>(stream_ >> 32)},
                    {static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32)});
}

double CounterRng::uniform(uint64_t index, uint32_t attempt) const {
  auto b = block(index, attempt);
  uint64_t bits = (uint64_t{b[0]} << 21) ^ (uint64_t{b[1]} >> 11);  // 53 bits
  bits &= (uint64_t{1} << 53) - 1;
  return (static_cast<double>(bits) + 0.5) * 0x1p-53;  // never 0 or 1
}

double portable_log(double x) {
  int e = 0;
  double m = std::frexp(x, &e);  // exact: x = m * 2^e, m in [0.5, 1)
  if (m < 0.70710678118654752440) {
    m *= 2.0;
    e -= 1;
  }
  // log(m) = 2 atanh(z), z = (m-1)/(m+1), |z| <= 0.1716: 14 odd terms reach below 1e-17.
  double z = (m - 1.0) / (m + 1.0);
  double z2 = z * z, term = z, sum = 0.0;
  for (int k = 0; k < 14; ++k) {
    sum += term / static_cast<double>(2 * k + 1);
    term *= z2;
  }
  constexpr double ln2 = 0.69314718055994530942;
  return 2.0 * sum + static_cast<double>(e) * ln2;
}

double CounterRng::normal(uint64_t index) const {
  for (uint32_t attempt = 0;; ++attempt) {
    auto b = block(index, 0x80000000u | attempt);
    double u = ((static_cast<double>(b[0] >> 5) * 67108864.0 + static_cast<double>(b[1] >> 6)) + 0.5) * 0x1p-53;
    double w = ((static_cast<double>(b[2] >> 5) * 67108864.0 + static_cast<double>(b[3] >> 6)) + 0.5) * 0x1p-53;
    double x = 2.0 * u - 1.0, y = 2.0 * w - 1.0;
    double s = x * x + y * y;
    if (s >= 1.0 || s == 0.0) continue;  // rejection keeps the pair uniform on the disc
    return x * std::sqrt(-2.0 * portable_log(s) / s);
  }
}

}  // namespace flashcheck
