#include "verify/check_file.h"

#include <functional>
#include <future>
#include <optional>

#include "reference/gpu_oracle.h"

#include "verify/backward_expected.h"
#include "verify/check_file_format.h"
#include "verify/element_pass_device.h"
#include "verify/judge.h"
#include "verify/names.h"
#include "verify/safetensors.h"
#include "verify/untrusted_text.h"

namespace flashcheck {

namespace {

struct ReadFile {
  CheckFileCase c;
  NameAudit names;
  // The kernel's outputs as the judge takes them, and its declarations with the caller's tiles.
  KernelOutput output() const {
    KernelOutput out{c.o, std::nullopt, std::nullopt, c.padding_written};
    if (c.lse) out.lse = *c.lse;
    return out;
  }
  Declared declared(const CheckFileOptions& opt) const {
    Declared d = c.declared;
    d.tile_q = opt.tile_q;
    d.tile_kv = opt.tile_kv;
    return d;
  }
};

ReadFile read_file(const std::filesystem::path& path, const CheckFileOptions& opt, const std::function<void(const char*)>& lap,
                   bool keep_raw = false) {
  SafetensorsFile f;
  try {
    f = read_safetensors(path);
  } catch (const SafetensorsError& e) {
    throw CannotTest(e.what());
  }
  lap("read file");
  // A misspelt name (`casual`, `LSE`) would otherwise be judged as absent: the default causal mode,
  // or no LSE check at all. Near misses are refused; other unknown names are read past and said.
  NameAudit names = audit_names(f);
  if (names.refused()) throw CannotTest(names.refusal());
  return {read_check_case(f, opt.allow_nonfinite_inputs, lap, keep_raw), std::move(names)};
}

// Whether the GPU oracle will likely judge this file: asked for, or `auto` on a file large enough
// that its problem is (kGpuOracleWork is ~2e9 multiply-adds; a 256 MiB file of 16-bit tensors is
// past it for any head dim). Then the CUDA context is created while the file is read: that start
// (~0.3-0.5 s on the device hosts) was otherwise paid after the read, in every production-size check.
bool likely_gpu_oracle(const std::filesystem::path& path, OracleChoice oracle) {
  if (oracle == OracleChoice::gpu) return true;
  if (oracle != OracleChoice::automatic) return false;
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path, ec);
  return !ec && bytes >= (uintmax_t{256} << 20);
}

// A raw case's q, k, v on the device, their NaN/Inf refused there; nullopt where they cannot go
// (no usable GPU, no room), and then the case is widened and scanned here as any other.
std::optional<DeviceInputs> inputs_to_device(CheckFileCase& c) {
  std::optional<DeviceInputs> dev;
  if (!gpu_oracle_unavailable()) {
    auto span16 = [](const StTensor& t) {
      return std::span<const uint16_t>(reinterpret_cast<const uint16_t*>(t.data.data()), t.data.size() / 2);
    };
    try {
      dev = upload_device_inputs(c.problem.dtype, span16(c.raw->q), span16(c.raw->k), span16(c.raw->v));
    } catch (const DeviceOutOfMemory&) {  // the host's way
    }
  }
  if (!dev) {
    refuse_nonfinite_raw(c);
    widen_raw_inputs(c);
    return dev;
  }
  refuse_nonfinite_raw(c, [&](Tensor t, int64_t n) {
    return first_nonfinite(t == Tensor::q ? dev->q : t == Tensor::k ? dev->k : dev->v, dev->dtype, n);
  });
  return dev;
}

}  // namespace

CheckFileVerdict check_file(const std::filesystem::path& path, const CheckFileOptions& opt) {
  std::vector<std::pair<std::string, double>> timings;
  PhaseTimer clock(timings);
  auto lap = [&](const char* phase) { clock.lap(phase); };
  std::future<void> cuda_started;
  const bool gpu_likely = likely_gpu_oracle(path, opt.oracle);
  if (gpu_likely) cuda_started = std::async(std::launch::async, [] { (void)gpu_oracle_unavailable(); });
  // Where the GPU oracle will likely judge the file, 16-bit inputs go to the device as read: no
  // widening of gigabytes on the host (make_expected widens them only for a step on the CPU).
  ReadFile rf = read_file(path, opt, lap, gpu_likely);
  if (cuda_started.valid()) {
    cuda_started.get();
    lap("CUDA start (beside the read)");
  }
  std::optional<DeviceInputs> dev;
  if (rf.c.raw) {
    dev = inputs_to_device(rf.c);
    lap(dev ? "inputs to the device, NaN/Inf scan there" : "widen to fp32");
  }
  // A raw o is widened (0.25 s of host time at (4,64,8192,128)) in a task beside the oracle's GPU
  // work, while the host is otherwise idle: started at the end of the read it stretched the inputs'
  // upload, which it contends with for memory bandwidth (PERF.md session 19, call B). Where the
  // device element pass will read every row it is uploaded there too, on a stream of its own
  // (upload_beside: a plain upload waited for the oracle's queued kernels, and the oracle's next
  // copy for it). Its device array is taken here, before the oracle sizes its pieces by what is
  // free. The judge waits for the task where it first reads o.
  const CheckFileCase& c = rf.c;
  const NameAudit& names = rf.names;
  KernelOutput out = rf.output();  // before the task: it assigns c.o
  std::optional<DeviceArray> o_on_device;  // before the future: the task has ended before it goes
  if (c.raw && c.raw->o && dev && !opt.error_maps && opt.max_rows >= c.problem.seq_q &&
      !device_element_pass_unsupported(c.problem, false)) {
    try {
      o_on_device.emplace(static_cast<size_t>(c.problem.o_elems()) * sizeof(float));
    } catch (const DeviceOutOfMemory&) {  // the element pass uploads it, or runs on the host
    }
  }
  std::future<void> o_placed;
  if (c.raw && c.raw->o) {  // decided before the task starts: it releases c.raw->o once widened
    o_placed = std::async(std::launch::async, [&rf, &o_on_device] {
      widen_raw_output(rf.c);
      if (o_on_device) o_on_device->upload_beside(rf.c.o.data(), rf.c.o.size() * sizeof(float));
    });
    out.o_when_ready = [&] {
      o_placed.get();
      return KernelOutput::Ready{rf.c.o, o_on_device ? &*o_on_device : nullptr};
    };
  }
  JudgeOptions jo{opt.max_rows, opt.error_maps, opt.oracle, opt.timings};
  if (dev) jo.inputs_on_device = {&*dev, [&rf] { widen_raw_inputs(rf.c); }};
  Report r = judge(c.problem, c.inputs, out, rf.declared(opt), jo);
  if (opt.timings) r.timings.insert(r.timings.begin(), timings.begin(), timings.end());
  r.repro = "flashcheck check " + shell_word(path.string());  // runs as printed, whatever the path holds
  if (!out.lse) r.notes.push_back("lse: not checked (the file has no 'lse' tensor)");
  for (auto& line : c.notes) r.notes.push_back(line);
  for (auto& line : names.ignored_lines()) r.notes.push_back(line);
  CheckFileVerdict v{std::move(r), std::nullopt};
  if (c.gradients) {
    std::vector<std::pair<std::string, double>> backward_time;
    PhaseTimer backward_clock(backward_time);
    // Every row: the backward oracle has no row sampling yet (verify/backward_expected.h).
    BackwardOptions bo;
    bo.error_maps = opt.error_maps;
    bo.tile_q = opt.tile_q, bo.tile_kv = opt.tile_kv;
    std::vector<std::pair<std::string, double>> parts;
    const BackwardExpected expected = make_backward_expected(c.problem, c.inputs, c.gradients->d_out, opt.oracle, &parts);
    backward_clock.lap("backward expected (oracle, baselines)");
    v.backward = verify_backward(c.problem, expected, c.gradients->kernel, bo);
    backward_clock.lap("backward criteria");
    if (opt.timings) {  // the expected gradients' phase, its parts indented below it, then the criteria
      v.forward.timings.push_back(backward_time[0]);
      for (auto& [name, s] : parts) v.forward.timings.emplace_back("  " + name, s);
      v.forward.timings.push_back(backward_time[1]);
    }
    v.backward->repro = v.forward.repro;
    if (!c.gradients->kernel.dsinks && c.problem.sinks)
      v.backward->notes.push_back("dsinks: not checked (the file has no 'dsinks' tensor)");
    v.forward.notes.push_back(std::string("backward: ") + (v.backward->pass() ? "PASS" : "FAIL") +
                              ", judged apart (dq, dk, dv" + (c.gradients->kernel.dsinks ? ", dsinks" : "") +
                              ": the backward report); this verdict is the forward output's");
  }
  return v;
}

std::vector<ReadingVerdict> identify_file(const std::filesystem::path& path, const CheckFileOptions& opt) {
  const ReadFile rf = read_file(path, opt, [](const char*) {});
  return identify(rf.c.problem, rf.c.inputs, rf.output(), rf.declared(opt), JudgeOptions{opt.max_rows, false, opt.oracle, false});
}

}  // namespace flashcheck
