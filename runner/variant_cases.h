// Problem lines covering every variant of problem model 2 and every layout, small enough for the CPU
// oracles: the end-to-end runs of the registry, reliability and CLI tests draw from these (with
// fresh input seeds). Each line parses as `run --problem` takes it.
#pragma once
#include <string>
#include <vector>

namespace flashcheck {

struct VariantCase {
  const char* what;
  const char* line;
  bool varlen;  // layout=thd: judged per sequence (the criteria's varlen support)
};

inline const std::vector<VariantCase>& variant_cases() {
  static const std::vector<VariantCase> cases = {
      {"window", "b=2 hq=4 hkv=2 sq=37 skv=45 dqk=32 dv=32 causal=none dtype=bf16 window=5,3", false},
      {"window_causal", "b=1 hq=2 hkv=1 sq=50 skv=40 dqk=64 dv=64 causal=bottom_right dtype=f32 window=7,0", false},
      {"softcap", "b=1 hq=2 hkv=2 sq=33 skv=47 dqk=32 dv=32 causal=top_left dtype=bf16 softcap=5", false},
      {"alibi_symmetric", "b=2 hq=4 hkv=2 sq=21 skv=30 dqk=32 dv=32 causal=bottom_right dtype=f16 alibi=symmetric", false},
      {"alibi_signed_per_batch", "b=2 hq=2 hkv=1 sq=19 skv=25 dqk=32 dv=16 causal=none dtype=f32 alibi=signed slopes=batch", false},
      {"sinks", "b=1 hq=4 hkv=1 sq=30 skv=30 dqk=32 dv=32 causal=top_left dtype=bf16 sinks=1", false},
      {"bshd", "b=2 hq=4 hkv=2 sq=17 skv=29 dqk=64 dv=64 causal=bottom_right dtype=bf16 layout=bshd", false},
      {"seqused", "b=2 hq=2 hkv=2 sq=12 skv=40 dqk=32 dv=32 causal=none dtype=f32 used=17,40", false},
      {"paged", "b=2 hq=2 hkv=1 sq=9 skv=23,40 dqk=32 dv=32 causal=bottom_right dtype=bf16 page=7 pages=shuffled", false},
      {"fp8_e4m3_head", "b=2 hq=2 hkv=1 sq=20 skv=31 dqk=32 dv=32 causal=none dtype=e4m3 odtype=bf16 descale=head", false},
      {"fp8_e5m2_tensor", "b=1 hq=2 hkv=2 sq=16 skv=16 dqk=32 dv=32 causal=top_left dtype=e5m2 odtype=f16 descale=tensor", false},
      {"bshd_everything",
       "b=2 hq=4 hkv=2 sq=14 skv=26 dqk=32 dv=32 causal=bottom_right dtype=bf16 window=6,-1 softcap=8 alibi=symmetric sinks=1 "
       "layout=bshd used=20,26",
       false},
      {"thd", "b=3 hq=2 hkv=1 sq=5,0,17 skv=9,4,20 dqk=32 dv=32 causal=bottom_right dtype=bf16 layout=thd", true},
      {"thd_paged_shared", "b=3 hq=2 hkv=2 sq=4,7,1 skv=20,33,5 dqk=32 dv=32 causal=bottom_right dtype=bf16 layout=thd page=8 pages=shared",
       true},
      {"thd_everything",
       "b=2 hq=4 hkv=2 sq=13,6 skv=20,9 dqk=32 dv=32 causal=none dtype=bf16 window=4,2 softcap=8 alibi=signed "
       "slopes=batch sinks=1 layout=thd used=15,9",
       true},
  };
  return cases;
}

}  // namespace flashcheck
