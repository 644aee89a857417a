#!/usr/bin/env bash
# Instruction mix of each kernel in a binary's SASS (needs cuobjdump, i.e. the device machine):
# total instructions, tensor-core MMAs (HMMA from mma.sync, HGMMA from wgmma), ldmatrix, MUFU,
# local-memory spill traffic, and how many local loads/stores sit between a kernel's first and last
# tensor-core MMA (that is, inside its main loop).
#
#   tools/device/sass_stats.sh BINARY [ARCH=sm_90] [KERNEL_NAME_REGEX=mma_f16]   (sm_90a for wgmma_f16)
set -eu
bin=$1
arch=${2:-sm_90}
pattern=${3:-mma_f16}
cuobjdump -sass -arch "$arch" "$bin" | awk -v pat="$pattern" '
  /Function :/ { name = $3; keep = (name ~ pat); n = 0; next }
  keep && /^ +\/\*[0-9a-f]+\*\// {
    line = $0; sub(/^ +\/\*[0-9a-f]+\*\/ +/, "", line); sub(/ ;.*/, "", line)
    sub(/^@!?U?P[0-9T] +/, "", line); split(line, w, " "); op = w[1]
    ops[name, ++n] = op; cnt[name] = n; names[name] = 1
  }
  END {
    printf "%-72s %6s %6s %6s %6s %6s %6s %6s %8s\n", "kernel", "instr", "HMMA", "HGMMA", "LDSM", "MUFU", "LDL", "STL", "LDL/STL in loop"
    for (k in names) {
      first = 0; last = 0; hm = 0; hg = 0; ld = 0; mu = 0; ll = 0; sl = 0; inloop = 0
      for (i = 1; i <= cnt[k]; ++i) if (ops[k, i] ~ /^HG?MMA/) { if (!first) first = i; last = i }
      for (i = 1; i <= cnt[k]; ++i) {
        o = ops[k, i]
        if (o ~ /^HMMA/) hm++
        if (o ~ /^HGMMA/) hg++
        if (o ~ /^LDSM/) ld++
        if (o ~ /^MUFU/) mu++
        if (o ~ /^LDL/) { ll++; if (i > first && i < last) inloop++ }
        if (o ~ /^STL/) { sl++; if (i > first && i < last) inloop++ }
      }
      printf "%-72s %6d %6d %6d %6d %6d %6d %6d %8d\n", k, cnt[k], hm, hg, ld, mu, ll, sl, inloop
    }
  }'
