#!/usr/bin/env python3
"""Mutation testing for one kernel folder: how many small, realistic faults does a check catch?

Each mutant is one small textual change to the kernel's sources (a flipped bound, a dropped
barrier, a shallower cp.async wait, truncating instead of rounding, ...), with an id that stays
the same while the line it changes does. Modes (see tools/mutate/MUTATION.md):

  list     print the mutants (id, file:line, description)
  apply    show one mutant's diff, or apply it to a copy of the tree (--root)
  build    build every mutant's binary from a pre-built base build dir, in parallel
  run      run check commands on every built mutant: exit 1, a crash or a timeout kills it
  all      build and run in one pipeline under a deadline (one device call), then report
  report   score = killed / (tested - equivalent), survivors with their diffs
  selftest check the lexer, the operators, ids, apply, build, run and report on toy sources

Python 3 standard library only.
"""
import argparse
import concurrent.futures
import difflib
import hashlib
import json
import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field

SOURCE_EXTS = (".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc", ".c")


# ---------------------------------------------------------------------------------------------
# Lexing: which characters are code, comment, string or preprocessor. Operators only touch code
# (and PTX ones only strings): a flipped `<` in a comment is an equivalent mutant that costs a build.
# ---------------------------------------------------------------------------------------------

def classify(text):
    """One class letter per character: c code, m comment, s string/char literal, p preprocessor,
    x code that operators must leave alone (static_assert and __launch_bounds__ arguments)."""
    n = len(text)
    cls = ["c"] * n
    i = 0
    line_start = True
    while i < n:
        ch = text[i]
        if line_start and ch == "#":
            j = i
            while j < n and text[j] != "\n":
                if text[j] == "\\" and j + 1 < n and text[j + 1] == "\n":
                    j += 2
                    continue
                j += 1
            for k in range(i, j):
                cls[k] = "p"
            i = j
            continue
        if ch == "\n":
            line_start = True
            i += 1
            continue
        if not ch.isspace():
            line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            for k in range(i, j):
                cls[k] = "m"
            i = j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                cls[k] = "m"
            i = j
            continue
        if ch == 'R' and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            p = text.find("(", i + 2)
            delim = text[i + 2:p] if p >= 0 else ""
            end = text.find(")" + delim + '"', p + 1) if p >= 0 else -1
            j = n if end < 0 else end + len(delim) + 2
            for k in range(i, j):
                cls[k] = "s"
            i = j
            continue
        if ch == '"' or (ch == "'" and not (i > 0 and text[i - 1].isalnum())):  # 1'000 is a digit separator
            j = i + 1
            while j < n and text[j] != ch and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(n, j + 1)
            for k in range(i, j):
                cls[k] = "s"
            i = j
            continue
        i += 1
    # Arguments no runtime behaviour depends on: a mutant there fails to compile or changes nothing.
    for m in re.finditer(r"\b(static_assert|__launch_bounds__)\s*\(", text):
        if cls[m.start()] != "c":
            continue
        end = match_paren(text, cls, m.end() - 1)
        for k in range(m.start(), end):
            if cls[k] == "c":
                cls[k] = "x"
    instrumentation_only(text, cls)
    return "".join(cls)


PERTURB_MACRO = "FLASHCHECK_PERTURB"


def instrumentation_only(text, cls):
    """Code compiled only into the perturbed build (`#ifdef FLASHCHECK_PERTURB`, `#if
    defined(FLASHCHECK_PERTURB)`, the `#else` of `#ifndef FLASHCHECK_PERTURB`) is instrumentation,
    not the kernel: its mutants would be equivalent in the normal build and would break the checker
    in the perturbed one. Marked x (left alone), in place."""
    stack = []  # per open #if: None (another condition), or True/False = "this branch is perturbed-only"
    pos = 0
    for line in text.split("\n"):
        end = pos + len(line)
        hash_at = pos + len(line) - len(line.lstrip())
        d = re.match(r"\s*#\s*(ifdef|ifndef|if|elif|else|endif)\b(.*)", line) \
            if line.lstrip().startswith("#") and cls[hash_at] == "p" else None
        if d:
            kw, rest = d.group(1), d.group(2)
            mentions = re.search(r"\b%s\b" % PERTURB_MACRO, rest) is not None
            if kw in ("ifdef", "if"):
                stack.append(True if mentions and (kw == "ifdef" or re.fullmatch(r"\s*defined\s*\(?\s*%s\s*\)?\s*(//.*)?" % PERTURB_MACRO, rest)) else None)
            elif kw == "ifndef":
                stack.append(False if mentions else None)
            elif kw in ("else", "elif") and stack and stack[-1] is not None:
                stack[-1] = not stack[-1]
            elif kw == "endif" and stack:
                stack.pop()
        elif any(stack):
            for k in range(pos, min(end, len(cls))):
                if cls[k] == "c":
                    cls[k] = "x"
        pos = end + 1


def match_paren(text, cls, open_pos):
    """Index one past the bracket matching text[open_pos], counting code brackets only."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack = []
    i = open_pos
    while i < len(text):
        ch = text[i]
        if cls[i] in "cx":
            if ch in pairs:
                stack.append(pairs[ch])
            elif ch in ")]}":
                if not stack or stack[-1] != ch:
                    return i + 1
                stack.pop()
                if not stack:
                    return i + 1
        i += 1
    return len(text)


def all_class(cls, start, end, kind="c"):
    return all(cls[k] == kind for k in range(start, end))


def code_matches(pattern, text, cls, kind="c"):
    for m in re.finditer(pattern, text):
        if m.end() > m.start() and all_class(cls, m.start(), m.end(), kind):
            yield m


# ---------------------------------------------------------------------------------------------
# Operand extents, for operators that add to or drop an operand.
# ---------------------------------------------------------------------------------------------

def rhs_extent(text, cls, pos):
    """The right operand of a relational operator starting at `pos`: up to the first delimiter at
    bracket depth 0 whose precedence is lower than the comparison's. None if it spans lines."""
    i = pos
    while i < len(text) and text[i] == " ":
        i += 1
    start = i
    depth = 0
    while i < len(text):
        ch = text[i]
        if cls[i] != "c":
            if cls[i] in "mp" or ch == "\n":
                break
            i += 1
            continue
        two = text[i:i + 2]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                break
            depth -= 1
        elif depth == 0:
            if ch in ";,?\n" or two in ("&&", "||", "==", "!=") or (ch == ":" and two != "::" and text[i - 1] != ":"):
                break
            if ch in "&|^" or (ch == "=" and text[i - 1] not in "<>=!"):
                break
            if ch in "<>" and two not in ("<<", ">>") and text[i - 1] not in "<>" and text[i - 1] == " ":
                break
        i += 1
    end = i
    while end > start and text[end - 1] in " \t":
        end -= 1
    if end <= start or "\n" in text[start:end]:
        return None
    return start, end


SIMPLE_OPERAND = re.compile(r"(?:[A-Za-z_][\w]*(?:(?:\.|->|::)[A-Za-z_]\w*)*(?:\[[^\[\]\n]*\])*|\d[\w.]*)")


def operand_after(text, cls, pos):
    """The operand starting at `pos` (after the operator and its space): an identifier chain with
    subscripts, a literal, or a parenthesised group. None if it is a call or spans lines."""
    if pos >= len(text) or cls[pos] != "c":
        return None
    if text[pos] == "(":
        end = match_paren(text, cls, pos)
        if "\n" in text[pos:end]:
            return None
        return pos, end
    m = SIMPLE_OPERAND.match(text, pos)
    if not m:
        return None
    end = m.end()
    if end < len(text) and text[end] in "(<":  # a call or a template: leave it
        return None
    return pos, end


# ---------------------------------------------------------------------------------------------
# The catalogue. Each operator yields (start, end, replacement, description) on one file's text.
# ---------------------------------------------------------------------------------------------

OPERATORS = {}


def operator(code, summary):
    def register(fn):
        OPERATORS[code] = (fn, summary)
        return fn
    return register


FLOAT_LITERAL = re.compile(r"^-?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?[fF]?$")


@operator("ROR", "relational flip: < <-> <=, > <-> >= (binary, spaced operators only)")
def op_ror(text, cls):
    flip = {"<": "<=", "<=": "<", ">": ">=", ">=": ">"}
    for m in code_matches(r"(?<= )(<=|>=|<|>)(?= )", text, cls):
        yield m.start(), m.end(), flip[m.group(1)], "`%s` -> `%s`" % (m.group(1), flip[m.group(1)])


@operator("NEG", "negated equality: == <-> !=")
def op_neg(text, cls):
    for m in code_matches(r"(?<= )(==|!=)(?= )", text, cls):
        new = "!=" if m.group(1) == "==" else "=="
        yield m.start(), m.end(), new, "`%s` -> `%s`" % (m.group(1), new)


@operator("LOG", "logical connective swap: && <-> ||")
def op_log(text, cls):
    for m in code_matches(r"(?<= )(&&|\|\|)(?= )", text, cls):
        new = "||" if m.group(1) == "&&" else "&&"
        yield m.start(), m.end(), new, "`%s` -> `%s`" % (m.group(1), new)


@operator("BND", "bound moved by one the other way than ROR: a < b -> a < b - 1, a <= b -> a <= b + 1, "
                 "a > b -> a > b + 1, a >= b -> a >= b - 1 (integer bounds only)")
def op_bnd(text, cls):
    delta = {"<": "- 1", "<=": "+ 1", ">": "+ 1", ">=": "- 1"}
    for m in code_matches(r"(?<= )(<=|>=|<|>)(?= )", text, cls):
        ext = rhs_extent(text, cls, m.end())
        if not ext:
            continue
        s, e = ext
        rhs = text[s:e]
        if FLOAT_LITERAL.match(rhs) and ("." in rhs or rhs.lower().endswith("f")) or "INFINITY" in rhs:
            continue
        simple = SIMPLE_OPERAND.fullmatch(rhs) is not None
        new = ("%s %s" if simple else "(%s) %s") % (rhs, delta[m.group(1)])
        yield s, e, new, "bound `%s %s` -> `%s %s`" % (m.group(1), rhs, m.group(1), new)


@operator("OBO", "off-by-one removed: drops an existing ` + 1` or ` - 1`")
def op_obo(text, cls):
    for m in code_matches(r" [+-] 1(?![\w.])", text, cls):
        yield m.start(), m.end(), "", "`%s` removed" % m.group(0).strip()


@operator("SYNC", "barrier removed: __syncthreads(); / __syncwarp(...);")
def op_sync(text, cls):
    for m in code_matches(r"\b(__syncthreads\(\)|__syncwarp\([^()\n]*\))\s*;", text, cls):
        yield m.start(), m.end(), "", "`%s` removed" % m.group(1)


@operator("WAIT", "cp.async wait made shallower (N -> N+1) or removed")
def op_wait(text, cls):
    for m in code_matches(r"\b(\w*wait\w*)\s*<\s*(\d+)\s*>\s*\(\)", text, cls):
        n = int(m.group(2))
        yield m.start(2), m.end(2), str(n + 1), "`%s<%d>` -> `%s<%d>` (shallower)" % (m.group(1), n, m.group(1), n + 1)
    for m in code_matches(r"\b(__pipeline_wait_prior|\w*wait_group\w*)\s*\(\s*(\d+)\s*\)", text, cls):
        n = int(m.group(2))
        yield m.start(2), m.end(2), str(n + 1), "`%s(%d)` -> `%s(%d)` (shallower)" % (m.group(1), n, m.group(1), n + 1)
    for m in code_matches(r"\b(\w*wait\w*\s*(?:<\s*\d+\s*>)?\s*\([^()\n]*\))\s*;", text, cls):
        if "cp_async" in m.group(1) or "pipeline" in m.group(1) or "wait_group" in m.group(1) or "wait_all" in m.group(1):
            yield m.start(), m.end(), "", "`%s` removed" % m.group(1)
        elif "warpgroup" in m.group(1) or text.endswith("wgmma::", 0, m.start()):
            # wgmma.wait_group behind a wrapper (`wgmma::wait<N>()`, CUTLASS's warpgroup_wait<N>()):
            # the qualifier goes with the call.
            start = m.start() - (len("wgmma::") if text.endswith("wgmma::", 0, m.start()) else 0)
            yield start, m.end(), "", "`%s` removed" % text[start:m.end() - 1].rstrip()
    for m in code_matches(r"cp\.async(?:\.bulk)?\.wait_group(?:\.read)?\s+(\d+)", text, cls, kind="s"):
        n = int(m.group(1))
        yield m.start(1), m.end(1), str(n + 1), "PTX `%s` -> wait_group %d (shallower)" % (m.group(0), n + 1)


@operator("COMMIT", "cp.async group commit removed")
def op_commit(text, cls):
    for m in code_matches(r"\b(cp_async_commit\w*\(\)|__pipeline_commit\(\))\s*;", text, cls):
        yield m.start(), m.end(), "", "`%s` removed" % m.group(1)


# Conversions with a round-toward-zero twin of the same signature.
RZ_TWINS = ("__float2bfloat16", "__float2half", "__double2float", "__fadd", "__fsub", "__fmul", "__fdiv",
            "__fmaf", "__frcp", "__fsqrt", "__dadd", "__dmul", "__fma", "__float2int", "__float2uint")
# Pair conversions without one: rebuilt from two scalar truncations.
PAIR_RZ = {
    "__floats2bfloat162_rn": ("__halves2bfloat162", "__float2bfloat16_rz", 2),
    "__floats2half2_rn": ("__halves2half2", "__float2half_rz", 2),
    "__float22bfloat162_rn": ("__halves2bfloat162", "__float2bfloat16_rz", 1),
    "__float22half2_rn": ("__halves2half2", "__float2half_rz", 1),
}


def split_args(s):
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    return out


@operator("RND", "round-to-nearest conversion made truncating: *_rn -> *_rz, PTX cvt.rn -> cvt.rz")
def op_rnd(text, cls):
    for m in code_matches(r"\b(%s)_rn\b" % "|".join(RZ_TWINS), text, cls):
        yield m.start(), m.end(), m.group(1) + "_rz", "`%s_rn` -> `%s_rz` (truncates)" % (m.group(1), m.group(1))
    for m in code_matches(r"\b(%s)\s*\(" % "|".join(PAIR_RZ), text, cls):
        end = match_paren(text, cls, m.end() - 1)
        args = split_args(text[m.end():end - 1])
        make, scalar, arity = PAIR_RZ[m.group(1)]
        if len(args) != arity:
            continue
        if arity == 2:
            new = "%s(%s(%s), %s(%s))" % (make, scalar, args[0], scalar, args[1])
        else:
            new = "%s(%s((%s).x), %s((%s).y))" % (make, scalar, args[0], scalar, args[0])
        yield m.start(), end, new, "`%s` -> two `%s` (truncates)" % (m.group(1), scalar)
    for m in code_matches(r"\bcvt\.rn(i?)\b", text, cls, kind="s"):
        yield m.start(), m.end(), "cvt.rz" + m.group(1), "PTX `cvt.rn%s` -> `cvt.rz%s` (truncates)" % (m.group(1), m.group(1))


@operator("MAXMIN", "max <-> min swapped (fmaxf/fminf, fmax/fmin, max/min, __hmax/__hmin)")
def op_maxmin(text, cls):
    swap = {"fmaxf": "fminf", "fminf": "fmaxf", "fmax": "fmin", "fmin": "fmax", "max": "min", "min": "max",
            "__hmax": "__hmin", "__hmin": "__hmax", "__hmax2": "__hmin2", "__hmin2": "__hmax2"}
    for m in code_matches(r"\b(fmaxf|fminf|fmax|fmin|max|min|__hmax2?|__hmin2?)(?=\s*[(<])", text, cls):
        if m.start() > 0 and text[m.start() - 1] == ".":
            continue  # a member such as numeric_limits<>::max is not a reduction
        if text.startswith("::", m.start() - 2) and text[max(0, m.start() - 20):m.start()].rstrip(":").endswith("numeric_limits<float>"):
            continue
        yield m.start(), m.end(), swap[m.group(1)], "`%s` -> `%s`" % (m.group(1), swap[m.group(1)])


def float_names(text, cls):
    """Identifiers the file declares as float (locals, parameters, arrays, comma lists)."""
    names = set()
    for m in code_matches(r"\bfloat\b[\s&*]*([^;(){}=]*(?:=[^;,]*)?(?:,[^;(){}]*)*)", text, cls):
        for part in m.group(1).split(","):
            n = re.match(r"\s*(?:const\s+)?(?:float\b)?[\s&*]*([A-Za-z_]\w*)", part)
            if n:
                names.add(n.group(1))
    return names


def factor_is_float(text, operand, floats):
    if FLOAT_LITERAL.match(operand) and ("." in operand or operand.lower().endswith("f")):
        return True
    base = re.match(r"\(?\s*([A-Za-z_]\w*)", operand)
    return bool(base) and base.group(1) in floats


def factor_drops(text, cls, want_float):
    floats = float_names(text, cls)
    for m in code_matches(r"(?<=[\w)\]]) \* ", text, cls):
        ext = operand_after(text, cls, m.end())
        if not ext:
            continue
        operand = text[ext[0]:ext[1]]
        if factor_is_float(text, operand, floats) == want_float:
            yield m.start(), ext[1], "", "` * %s` dropped" % operand


@operator("MUL", "floating-point multiply removed: `x *= y;` deleted, or a float factor (a float literal or a "
                 "variable declared float in the file) dropped: rescales, normalisation, log2(e), ln 2")
def op_mul(text, cls):
    for m in code_matches(r"[^\n;{}]*? \*= [^\n;]*;", text, cls):
        s = m.start() + len(m.group(0)) - len(m.group(0).lstrip())
        yield s, m.end(), "", "`%s` removed" % text[s:m.end()]
    yield from factor_drops(text, cls, True)


@operator("ADDR", "integer factor dropped from a product (index and address arithmetic); opt-in: "
                  "most are killed by any test, and they double the catalogue")
def op_addr(text, cls):
    yield from factor_drops(text, cls, False)


@operator("DIV", "divisor dropped: ` / y` removed (tile counts, GQA head map, normalisation)")
def op_div(text, cls):
    for m in code_matches(r"(?<=[\w)\]]) / ", text, cls):
        ext = operand_after(text, cls, m.end())
        if not ext:
            continue
        yield m.start(), ext[1], "", "` / %s` dropped" % text[ext[0]:ext[1]]


@operator("SWZ", "swizzle broken: ` ^ y` dropped from an XOR")
def op_swz(text, cls):
    for m in code_matches(r"(?<=[\w)\]]) \^ ", text, cls):
        ext = operand_after(text, cls, m.end())
        if not ext:
            continue
        yield m.start(), ext[1], "", "` ^ %s` dropped" % text[ext[0]:ext[1]]


@operator("MASK", "bit mask halved: `& 2^k-1` -> `& 2^(k-1)-1` (e.g. & 7 -> & 3)")
def op_mask(text, cls):
    for m in code_matches(r"(?<= )& (\d+)(?![\w.])", text, cls):
        v = int(m.group(1))
        if v >= 3 and (v & (v + 1)) == 0:
            yield m.start(1), m.end(1), str(v >> 1), "`& %d` -> `& %d`" % (v, v >> 1)


@operator("SHIFT", "shift amount changed by one: << N / >> N -> N-1 (N+1 for N = 1)")
def op_shift(text, cls):
    for m in code_matches(r"(<<|>>) (\d+)(?![\w.])", text, cls):
        n = int(m.group(2))
        new = n - 1 if n >= 2 else n + 1
        yield m.start(2), m.end(2), str(new), "`%s %d` -> `%s %d`" % (m.group(1), n, m.group(1), new)


@operator("IDX", "computed index shifted: `a[expr]` -> `a[expr + 1]` where expr has an operator")
def op_idx(text, cls):
    for m in code_matches(r"(?<=[\w\]])\[", text, cls):
        end = match_paren(text, cls, m.start())
        inner = text[m.start() + 1:end - 1]
        if "\n" in inner or not re.search(r"[A-Za-z_]", inner) or not re.search(r"[-+*/%]|>>|<<", inner):
            continue
        if not all_class(cls, m.start(), end):
            continue
        # Operators that bind looser than + (shifts, bitwise, comparisons) need the parentheses.
        new = ("(%s) + 1" if re.search(r"<<|>>|[&|^?<>=]", inner) else "%s + 1") % inner
        yield m.start() + 1, end - 1, new, "index `[%s]` -> `[%s]`" % (inner, new)


@operator("INF", "-INFINITY fill made finite (-2^30), the replica's known-bad fill")
def op_inf(text, cls):
    for m in code_matches(r"-\s*INFINITY\b", text, cls):
        yield m.start(), m.end(), "-1073741824.0f", "`-INFINITY` -> `-2^30`"


# A wgmma wait: `wgmma::wait<N>()`, `warpgroup_wait<N>()`, or the PTX itself.
WGMMA_WAIT = re.compile(r"(?:\bwgmma::\w*wait\w*|\bwarpgroup_wait\w*)\s*<\s*\d+\s*>\s*\(\s*\)\s*;|wgmma\.wait_group")
# A consumer's release of a ring slot: an mbarrier arrival on an `empty` barrier, or a pipeline's
# consumer_release.
SLOT_RELEASE = re.compile(r"\b[\w:.>-]*(?:arrive\w*\s*\([^;\n]*empty[^;\n]*\)|consumer_release\s*\([^;\n]*\))\s*;")


@operator("REL", "slot release moved above the wgmma wait(s) before it in its block: the producer may "
                 "refill the slot while the wgmma reading it still runs (async-proxy race)")
def op_rel(text, cls):
    lines = text.split("\n")
    starts = []
    pos = 0
    for l in lines:
        starts.append(pos)
        pos += len(l) + 1

    def code_of(i):
        return "".join(ch if cls[starts[i] + k] in "cx" else " " for k, ch in enumerate(lines[i]))

    for i, line in enumerate(lines):
        m = SLOT_RELEASE.search(line)
        if not m or not all_class(cls, starts[i] + m.start(), starts[i] + m.end()) or line[:m.start()].strip():
            continue
        # Walking up the statements of the release's own block, stopping at its opening brace and at
        # any nested block (a loop or branch in between: moving across it is not this fault).
        waits = []
        for j in range(i - 1, -1, -1):
            code = code_of(j)
            if "{" in code or "}" in code or len(waits) == 2:
                break
            if WGMMA_WAIT.search(lines[j] if "wgmma.wait_group" in lines[j] else code):
                waits.append(j)
        for j in waits:
            moved = line + "\n" + text[starts[j]:starts[i]]
            yield starts[j], starts[i] + len(line) + 1, moved, "`%s` moved above `%s`" % (line.strip(), lines[j].strip())


@operator("COND", "if condition forced: if (c) -> if (false) / if (true)")
def op_cond(text, cls):
    for m in code_matches(r"\bif\s*\(", text, cls):
        end = match_paren(text, cls, m.end() - 1)
        cond = text[m.end():end - 1]
        if not all_class(cls, m.end() - 1, end) or cond.strip() in ("true", "false"):
            continue
        short = " ".join(cond.split())
        for val in ("false", "true"):
            yield m.end(), end - 1, val, "`if (%s)` -> `if (%s)`" % (short, val)


# ---------------------------------------------------------------------------------------------
# Mutants
# ---------------------------------------------------------------------------------------------

@dataclass
class Mutant:
    id: str
    op: str
    file: str  # relative to the source root
    line: int
    start: int
    end: int
    replacement: str
    description: str
    diff: str = ""


def source_files(root, kernel_dir, also):
    files = []
    kd = os.path.join(root, kernel_dir)
    if not os.path.isdir(kd):
        raise SystemExit("mutate.py: kernel folder %s does not exist under %s" % (kernel_dir, root))
    for dirpath, _, names in os.walk(kd):
        for n in sorted(names):
            if n.endswith(SOURCE_EXTS):
                files.append(os.path.relpath(os.path.join(dirpath, n), root))
    for a in also or []:
        if not os.path.isfile(os.path.join(root, a)):
            raise SystemExit("mutate.py: --also file %s does not exist under %s" % (a, root))
        files.append(os.path.normpath(a))
    return sorted(set(files))


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


def make_diff(rel, before, after):
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), "a/" + rel, "b/" + rel, n=1))


def mutants_of_file(rel, text, ops):
    cls = classify(text)
    lines = text.split("\n")
    out = []
    seen = set()
    # Identical lines are told apart by their rank among equal lines, not by their position, so an
    # id survives edits elsewhere in the file.
    rank_of_line = {}
    counts = {}
    for i, l in enumerate(lines):
        key = l.strip()
        rank_of_line[i + 1] = counts.get(key, 0)
        counts[key] = counts.get(key, 0) + 1
    for code in ops:
        fn, _ = OPERATORS[code]
        per_line = {}
        for start, end, repl, desc in fn(text, cls):
            if (start, end, repl) in seen:
                continue
            seen.add((start, end, repl))
            ln = line_of(text, start)
            k = per_line.get(ln, 0)
            per_line[ln] = k + 1
            key = "\0".join([rel, code, lines[ln - 1].strip(), str(rank_of_line[ln]), str(k), repl])
            mid = "%s-%s-%s" % (code, os.path.basename(rel), hashlib.sha1(key.encode()).hexdigest()[:8])
            after = text[:start] + repl + text[end:]
            out.append(Mutant(mid, code, rel, ln, start, end, repl, desc, make_diff(rel, text, after)))
    return out


OPT_IN = ("ADDR",)


def enumerate_mutants(root, kernel_dir, also=None, ops=None, sample=None, sample_seed=0, ids=None):
    ops = ops or [o for o in OPERATORS if o not in OPT_IN or ids]
    for o in ops:
        if o not in OPERATORS:
            raise SystemExit("mutate.py: unknown operator %s (known: %s)" % (o, ", ".join(OPERATORS)))
    out = []
    for rel in source_files(root, kernel_dir, also):
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            out.extend(mutants_of_file(rel, f.read(), ops))
    if ids:
        want = set(ids)
        out = [m for m in out if m.id in want]
        missing = want - {m.id for m in out}
        if missing:
            raise SystemExit("mutate.py: no such mutant id: %s" % ", ".join(sorted(missing)))
    if sample is not None and sample < len(out):
        # A sample keyed by id, not by position: the same seed picks the same mutants after edits.
        out = sorted(out, key=lambda m: hashlib.sha1(("%d:%s" % (sample_seed, m.id)).encode()).hexdigest())[:sample]
        out.sort(key=lambda m: (m.file, m.start, m.op))
    return out


def apply_mutant(text, m):
    return text[:m.start] + m.replacement + text[m.end:]


def shard(items, spec):
    if not spec:
        return items
    i, n = (int(x) for x in spec.split("/"))
    if not (0 <= i < n):
        raise SystemExit("mutate.py: --shard wants i/N with 0 <= i < N, got %s" % spec)
    return [x for k, x in enumerate(items) if k % n == i]


# ---------------------------------------------------------------------------------------------
# Building: one mutant = the kernel's translation units recompiled from a mutated copy of its
# folder, then the target relinked with those objects ahead of the base's archives. Nothing else
# is rebuilt: the base build dir must be configured with -DCMAKE_EXPORT_COMPILE_COMMANDS=ON and
# have built the target.
# ---------------------------------------------------------------------------------------------

DEP_FLAGS_WITH_ARG = ("-MT", "-MF", "-MQ")


def tu_args(entry):
    if "arguments" in entry:
        return list(entry["arguments"])
    return shlex.split(entry["command"])


def include_closure(path, root, cache):
    """Every file `path` includes with quotes, transitively, resolved like the compiler does for
    the project's own headers (the includer's folder, then the source root)."""
    if path in cache:
        return cache[path]
    cache[path] = set()
    found = set()
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return found
    for inc in re.findall(r'^\s*#\s*include\s*"([^"]+)"', text, re.M):
        for base in (os.path.dirname(path), root):
            cand = os.path.realpath(os.path.join(base, inc))
            if os.path.isfile(cand):
                found.add(cand)
                found |= include_closure(cand, root, cache)
                break
    cache[path] = found
    return found


@dataclass
class BuildPlan:
    root: str
    base: str
    target: str
    tus: list  # [{file, directory, args, output}]
    link_cwd: str
    link_args: list
    closure: dict = field(default_factory=dict)  # tu file -> set of included files


def plan_build_tus(root, base, kernel_dir):
    root = os.path.realpath(root)
    base = os.path.realpath(base)
    cc_path = os.path.join(base, "compile_commands.json")
    if not os.path.isfile(cc_path):
        raise SystemExit("mutate.py: %s not found: configure the base build with -DCMAKE_EXPORT_COMPILE_COMMANDS=ON "
                         "and build the kernel first" % cc_path)
    with open(cc_path) as f:
        entries = json.load(f)
    kd = os.path.realpath(os.path.join(root, kernel_dir)) + os.sep
    tus = []
    seen = set()
    for e in entries:
        src = os.path.realpath(os.path.join(e["directory"], e["file"]))
        if src.startswith(kd):
            args = tu_args(e)
            # A base configured with -DFLASHCHECK_PERTURB=ON compiles the kernel twice: the normal
            # objects are the kernel's (--perturb adds the define to them itself).
            if any(a.startswith("-DFLASHCHECK_PERTURB") for a in args) or src in seen:
                continue
            seen.add(src)
            out = e.get("output")
            if not out:
                out = args[args.index("-o") + 1]
            tus.append({"file": src, "rel": os.path.relpath(src, root), "directory": e["directory"], "args": args,
                        "output": os.path.normpath(os.path.join(e["directory"], out))})
    if not tus:
        raise SystemExit("mutate.py: no translation unit of %s in %s (is the kernel built in this configuration? "
                         "CUDA kernels need nvcc at configure time)" % (kernel_dir, cc_path))
    return tus


def plan_build(root, base, target, kernel_dir):
    root = os.path.realpath(root)
    base = os.path.realpath(base)
    tus = plan_build_tus(root, base, kernel_dir)
    link_cwd, link_args = find_link_command(base, target)
    # A folder may hold sources of several targets (gpu/plugin: one .c in three libraries): when the
    # link line names objects of the folder, only those are the target's own.
    named = {os.path.realpath(os.path.join(link_cwd, a)) for a in link_args}
    own = [t for t in tus if os.path.realpath(t["output"]) in named]
    if own:
        tus = own
    cache = {}
    closure = {t["file"]: include_closure(t["file"], root, cache) for t in tus}
    return BuildPlan(root, base, target, tus, link_cwd, link_args, closure)


def find_link_command(base, target):
    for dirpath, dirnames, names in os.walk(base):
        if os.path.basename(dirpath) == target + ".dir" and "link.txt" in names:
            with open(os.path.join(dirpath, "link.txt")) as f:
                lines = [l for l in f.read().splitlines() if l.strip()]
            cwd = os.path.dirname(os.path.dirname(dirpath))  # <subdir>/CMakeFiles/<target>.dir
            return cwd, shlex.split(lines[-1])
        dirnames[:] = [d for d in dirnames if not d.startswith("mutant")]
    if os.path.isfile(os.path.join(base, "build.ninja")):
        out = subprocess.run(["ninja", "-C", base, "-t", "commands", target], capture_output=True, text=True)
        cmds = [l for l in out.stdout.splitlines() if l.strip()]
        if out.returncode == 0 and cmds:
            last = cmds[-1]
            if last.startswith("cd ") and " && " in last:
                cd, last = last.split(" && ", 1)
                return os.path.join(base, shlex.split(cd)[1]), shlex.split(last)
            return base, shlex.split(last)
    raise SystemExit("mutate.py: no link command for target %s under %s (Makefile link.txt or ninja)" % (target, base))


# ---------------------------------------------------------------------------------------------
# Plugin mode: each mutant becomes a small shared library (the kernel's translation units plus the
# gpu/plugin/kernel_module.cpp adapter) that an unmutated flashcheck loads with --plugin, instead of
# a whole flashcheck binary. The adapter exports the kernel's Capabilities as the plugin ABI 1.1
# declared space, so the campaign on the module draws the same problems and tiles as on the built-in.
# ---------------------------------------------------------------------------------------------

# Compiled once per work folder and linked into every module: the adapter and what it needs from
# the kernels layer (the registrar) and the problem model (Problem::softmax_scale).
MODULE_SOURCES = ("gpu/plugin/kernel_module.cpp", "gpu/kernel.cpp", "reference/problem.cpp", "reference/dtype.cpp")
ARCH_FLAGS = ("--generate-code", "-gencode", "--gpu-architecture", "-arch", "--gpu-code", "-code")


def is_nvcc(args):
    return os.path.basename(args[0]).startswith("nvcc")


def plugin_args(args, arch):
    """A TU's compile command for a module: position-independent, and CUDA code for `arch` alone
    (a module is built for the one GPU it is checked on; half or less of the compile)."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if is_nvcc(args) and (a in ARCH_FLAGS or a.split("=", 1)[0] in ARCH_FLAGS):
            skip = "=" not in a
            continue
        out.append(a)
    if is_nvcc(args):
        out.insert(1, "-gencode=arch=compute_%s,code=sm_%s" % (arch, arch))
        if not any("fPIC" in a for a in out):
            out.insert(1, "-Xcompiler=-fPIC")
    elif "-fPIC" not in out:
        out.insert(1, "-fPIC")
    return out


def cuda_lib_dir(tus):
    for t in tus:
        if is_nvcc(t["args"]):
            nvcc = t["args"][0]
            nvcc = nvcc if os.path.isabs(nvcc) else (shutil.which(nvcc) or nvcc)
            top = os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
            for sub in ("lib64", "targets/x86_64-linux/lib", "lib"):
                if os.path.isdir(os.path.join(top, sub)):
                    return os.path.join(top, sub)
    return None


def plan_plugin(root, base, kernel_dir, work, arch="90a", suffix=".mutant", cudart="shared", jobs=2, defines=()):
    """A BuildPlan whose 'link' makes WORK/_module/<kernel>.so from base objects compiled here (the
    unmutated module, also the baseline), so build_one swaps in a mutant's objects exactly as it
    does for a flashcheck binary. `defines` (NAME or NAME=VALUE) are added to every compile: the
    perturbed build is `FLASHCHECK_PERTURB=1` (gpu/common/perturb.h)."""
    root = os.path.realpath(root)
    work = os.path.realpath(work)
    kplan = plan_build_tus(root, base, kernel_dir)
    for t in kplan:
        t["args"] = t["args"][:1] + ["-D" + d for d in defines] + t["args"][1:]
    cxx = next((t for t in kplan if not is_nvcc(t["args"])), None)
    if cxx is None:
        raise SystemExit("mutate.py: --plugin needs a C++ translation unit in %s (its register.cpp) to take the "
                         "compiler and flags from" % kernel_dir)
    mod = os.path.join(work, "_module")
    os.makedirs(mod, exist_ok=True)
    tus = []
    for t in kplan:
        t = dict(t, args=plugin_args(t["args"], arch), output=os.path.join(mod, "k_" + os.path.basename(t["file"]) + ".o"))
        tus.append(t)
    extra = []
    for rel in MODULE_SOURCES:
        src = os.path.join(root, rel)
        args = [a if os.path.realpath(os.path.join(cxx["directory"], a)) != cxx["file"] else src
                for a in plugin_args(cxx["args"], arch)]
        if rel.endswith("kernel_module.cpp"):
            args.insert(1, '-DFC_MODULE_SUFFIX="%s"' % suffix)
        extra.append({"file": src, "rel": rel, "directory": cxx["directory"], "args": args,
                      "output": os.path.join(mod, "m_" + os.path.basename(rel) + ".o")})
    with open(os.path.join(mod, "exports.map"), "w") as f:
        # Only the entry point: the module's registrar and kernel list bind inside the module.
        f.write("{ global: flashcheck_get_kernel; local: *; };\n")
    libdir = cuda_lib_dir(tus)
    link = [cxx["args"][0], "-shared", "-o", "PLACEHOLDER"] + [t["output"] for t in tus + extra] + \
        ["-Wl,--version-script=" + os.path.join(mod, "exports.map"), "-Wl,-z,defs", "-Wl,-rpath,$ORIGIN"]
    if libdir:
        link += ["-L" + libdir, "-lcudart" if cudart == "shared" else "-l:libcudart_static.a"]
        link += ["-ldl", "-lrt", "-lpthread"]
    link += ["-lm"]
    name = os.path.basename(os.path.normpath(kernel_dir)) + ".so"
    cache = {}
    closure = {t["file"]: include_closure(t["file"], root, cache) for t in tus}
    plan = BuildPlan(root, base, name, tus, mod, link, closure)
    lib = os.path.join(mod, name)
    stamp = os.path.join(mod, "module.json")
    key = {"arch": arch, "suffix": suffix, "cudart": cudart, "link": link,
           "compile": [t["args"] for t in tus + extra]}
    if (read_json(stamp) or {}).get("key") != key or not os.path.exists(lib):
        t0 = time.time()
        with open(os.path.join(mod, "build.log"), "w") as log:
            def compile_once(t):
                # An object compiled by the same command after its sources last changed is reused
                # (a failed link must not cost the ~40 s kernel compile again).
                cmd = compile_out(t)
                stamp_o = t["output"] + ".cmd"
                srcs = [t["file"]] + sorted(include_closure(t["file"], root, cache))
                if os.path.exists(t["output"]) and os.path.exists(stamp_o) and open(stamp_o).read() == repr(cmd) and \
                        os.path.getmtime(t["output"]) > max(os.path.getmtime(x) for x in srcs):
                    return 0
                rc = sh(cmd, t["directory"], log)
                if rc == 0:
                    with open(stamp_o, "w") as f:
                        f.write(repr(cmd))
                return rc
            with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as ex:
                rcs = list(ex.map(compile_once, tus + extra))
            if any(rcs) or sh([lib if a == "PLACEHOLDER" else a for a in link], mod, log):
                raise SystemExit("mutate.py: the unmutated module does not build; see %s" % os.path.join(mod, "build.log"))
        write_json(stamp, {"key": key, "seconds": round(time.time() - t0, 1), "library": name})
        print("built the unmutated module %s in %.0fs" % (lib, time.time() - t0), flush=True)
    return plan


def rewrite_compile(args, output, source=None):
    """A compile command with dependency-file flags dropped, its output set to `output` and, when
    `source` is given as (real path of the original source, replacement), that source replaced."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in DEP_FLAGS_WITH_ARG:
            skip = True
            continue
        if a in ("-MD", "-MMD"):
            continue
        if a == "-o":
            out += ["-o", output]
            skip = True
            continue
        if source and not a.startswith("-") and os.path.realpath(a) == source[0]:
            out.append(source[1])
            continue
        out.append(a)
    return out


def compile_out(t):
    """t's own compile command with its output redirected to t['output'] (dependency files dropped)."""
    return rewrite_compile(t["args"], t["output"])


def compile_args_for(tu, mutant_src, obj):
    args = tu["args"]
    # Source paths in the command are relative to the TU's directory: compare them resolved there.
    resolved = [a if a.startswith("-") else os.path.join(tu["directory"], a) for a in args[1:]]
    original = dict(zip(resolved, args[1:]))
    rewritten = rewrite_compile(resolved, obj, (os.path.realpath(tu["file"]), os.path.join(mutant_src, tu["rel"])))
    return [args[0], "-I" + mutant_src] + [original.get(a, a) for a in rewritten]


def link_args_for(plan, objs, exe):
    args = list(plan.link_args)
    originals = {os.path.realpath(t["output"]): o for t, o in objs}
    replaced = set()
    for i, a in enumerate(args):
        r = os.path.realpath(os.path.join(plan.link_cwd, a))
        if r in originals:
            args[i] = originals[r]
            replaced.add(r)
    extra = [o for r, o in originals.items() if r not in replaced]
    args = [args[0]] + extra + args[1:]  # ahead of the archives: their copies are never pulled in
    i = args.index("-o")
    args[i + 1] = exe
    return args


def sh(args, cwd, log):
    t = subprocess.run(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log.write("$ (cd %s && %s)\n%s" % (cwd, " ".join(shlex.quote(a) for a in args), t.stdout))
    return t.returncode


def build_one(plan, m, work, kernel_dir, also, keep=False, dry_run=False):
    d = os.path.join(work, m.id)
    os.makedirs(d, exist_ok=True)
    src = os.path.join(d, "src")
    mutated = os.path.realpath(os.path.join(plan.root, m.file))
    affected = [t for t in plan.tus if t["file"] == mutated or mutated in plan.closure[t["file"]]]
    t0 = time.time()
    result = {"id": m.id, "seconds": 0.0, "tus": [os.path.relpath(t["file"], plan.root) for t in affected]}
    if not affected:
        result.update(status="unreachable", why="no translation unit of the kernel includes " + m.file)
        write_json(os.path.join(d, "build.json"), result)
        return result
    shutil.rmtree(src, ignore_errors=True)
    shutil.copytree(os.path.join(plan.root, kernel_dir), os.path.join(src, kernel_dir))
    for a in also or []:
        os.makedirs(os.path.dirname(os.path.join(src, a)), exist_ok=True)
        shutil.copy2(os.path.join(plan.root, a), os.path.join(src, a))
    with open(os.path.join(plan.root, m.file), encoding="utf-8") as f:
        text = f.read()
    with open(os.path.join(src, m.file), "w", encoding="utf-8") as f:
        f.write(apply_mutant(text, m))
    with open(os.path.join(d, "diff.patch"), "w") as f:
        f.write(m.diff)
    exe = os.path.join(d, os.path.basename(plan.target))
    objs = []
    status = "built"
    with open(os.path.join(d, "build.log"), "w") as log:
        cmds = []
        for k, t in enumerate(affected):
            obj = os.path.join(d, "obj%d_%s.o" % (k, os.path.basename(t["file"])))
            cmds.append((compile_args_for(t, src, obj), t["directory"]))
            objs.append((t, obj))
        cmds.append((link_args_for(plan, objs, exe), plan.link_cwd))
        if dry_run:
            for a, cwd in cmds:
                print("(cd %s && %s)" % (cwd, " ".join(shlex.quote(x) for x in a)))
            return result
        for a, cwd in cmds:
            if sh(a, cwd, log) != 0:
                status = "build_failed"
                break
    result["seconds"] = round(time.time() - t0, 2)
    result["status"] = status
    result["binary"] = os.path.basename(exe)
    if status != "built":
        with open(os.path.join(d, "build.log")) as f:
            result["why"] = f.read()[-2000:]
    if not keep:
        shutil.rmtree(src, ignore_errors=True)
        for _, o in objs:
            if os.path.exists(o):
                os.remove(o)
    write_json(os.path.join(d, "build.json"), result)
    return result


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def save_catalogue(work, mutants, args):
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, "mutants.json")
    old = read_json(path) or {"mutants": []}
    perturb = check_work_kind(work, args)
    by_id = {m["id"]: m for m in old["mutants"]}
    for m in mutants:
        by_id[m.id] = asdict(m)
    write_json(path, {"kernel_dir": args.kernel_dir, "also": args.also or [], "perturb": perturb,
                      "mutants": list(by_id.values())})


# ---------------------------------------------------------------------------------------------
# Running checks
# ---------------------------------------------------------------------------------------------

def run_check(cmd, timeout, env):
    """(verdict, rc, seconds, tail): verdict pass | killed | untestable | timeout | crash."""
    t0 = time.time()
    p = subprocess.Popen(["bash", "-c", cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True, env=env)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        return "timeout", None, round(time.time() - t0, 2), (out or "")[-3000:]
    rc = p.returncode
    dt = round(time.time() - t0, 2)
    tail = (out or "")[-3000:]
    if rc == 0:
        return "pass", rc, dt, tail
    if rc == 1:
        return "killed", rc, dt, tail
    if rc == 125:
        return "untestable", rc, dt, tail
    return "crash", rc, dt, tail


def run_one(m_id, d, checks, timeout, env):
    exe_dir = d
    b = read_json(os.path.join(d, "build.json")) or {}
    exe = os.path.join(d, b.get("binary", ""))
    result = {"id": m_id, "checks": []}
    final = "survived"
    for k, c in enumerate(checks):
        cmd = c.replace("{bin}", shlex.quote(exe)).replace("{id}", m_id).replace("{dir}", shlex.quote(exe_dir))
        verdict, rc, dt, tail = run_check(cmd, timeout, env)
        result["checks"].append({"check": k, "verdict": verdict, "rc": rc, "seconds": dt, "tail": tail})
        if verdict in ("killed", "timeout", "crash"):
            final = "killed"
            result["killed_by"] = "check %d: %s%s" % (k, verdict, "" if rc in (None, 1) else " rc=%s" % rc)
            break
        if verdict == "untestable":
            final = "untestable"
    result["status"] = final
    result["seconds"] = round(sum(c["seconds"] for c in result["checks"]), 2)
    result["build_seconds"] = b.get("seconds")
    write_json(os.path.join(d, "result.json"), result)
    return result


def check_env(jobs):
    env = dict(os.environ)
    if "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // max(1, jobs)))
    return env


def run_baseline(args, env):
    if not args.baseline:
        return True
    for k, c in enumerate(args.check):
        cmd = c.replace("{bin}", shlex.quote(args.baseline)).replace("{id}", "baseline").replace("{dir}", ".")
        verdict, rc, dt, tail = run_check(cmd, args.timeout, env)
        print("baseline check %d: %s (rc=%s, %.1fs)" % (k, verdict, rc, dt), flush=True)
        if verdict != "pass":
            print(tail)
            print("mutate.py: the unmutated binary fails check %d: fix the check before scoring mutants" % k)
            return False
    return True


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------

def read_equivalent(path):
    eq = {}
    if not path:
        return eq
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 1)
            if len(parts) < 2:
                raise SystemExit("mutate.py: %s:%d: mutant %s has no reason (format: ID reason...)" % (path, n, parts[0]))
            eq[parts[0]] = parts[1]
    return eq


def gather(work):
    cat = read_json(os.path.join(work, "mutants.json"))
    if not cat:
        raise SystemExit("mutate.py: no mutants.json in %s (run build or all first)" % work)
    rows = []
    for m in cat["mutants"]:
        d = os.path.join(work, m["id"])
        b = read_json(os.path.join(d, "build.json")) or {}
        r = read_json(os.path.join(d, "result.json")) or {}
        rows.append((m, b, r))
    return cat, rows


def compute_report(work, equivalent):
    cat, rows = gather(work)
    s = {"listed": len(rows), "built": 0, "stillborn": 0, "unreachable": 0, "not_built": 0, "tested": 0,
         "killed": 0, "survived": 0, "untestable": 0, "not_run": 0, "equivalent": 0}
    per_op = {}
    survivors, untestable, stillborn, killed_equiv = [], [], [], []
    known = set()
    for m, b, r in rows:
        known.add(m["id"])
        op = per_op.setdefault(m["op"], {"killed": 0, "survived": 0, "equivalent": 0, "other": 0})
        bs = b.get("status")
        if bs == "build_failed":
            s["stillborn"] += 1
            stillborn.append(m)
            op["other"] += 1
            continue
        if bs == "unreachable":
            s["unreachable"] += 1
            op["other"] += 1
            continue
        if bs != "built":
            s["not_built"] += 1
            op["other"] += 1
            continue
        s["built"] += 1
        st = r.get("status")
        if st is None:
            s["not_run"] += 1
            op["other"] += 1
        elif st == "untestable":
            s["untestable"] += 1
            untestable.append((m, r))
            op["other"] += 1
        elif st == "killed":
            s["tested"] += 1
            s["killed"] += 1
            op["killed"] += 1
            if m["id"] in equivalent:
                killed_equiv.append(m)
        else:
            s["tested"] += 1
            s["survived"] += 1
            if m["id"] in equivalent:
                s["equivalent"] += 1
                op["equivalent"] += 1
            else:
                op["survived"] += 1
                survivors.append((m, r))
    denom = s["tested"] - s["equivalent"]
    s["score"] = (s["killed"] / denom) if denom > 0 else None
    unknown = sorted(set(equivalent) - known)
    return {"kernel_dir": cat.get("kernel_dir"), "summary": s, "per_op": per_op,
            "survivors": [{"id": m["id"], "file": m["file"], "line": m["line"], "description": m["description"],
                           "diff": m["diff"]} for m, _ in survivors],
            "untestable": [{"id": m["id"], "tail": r["checks"][-1]["tail"][-300:] if r.get("checks") else ""}
                           for m, r in untestable],
            "stillborn": [m["id"] for m in stillborn],
            "declared_equivalent_but_killed": [m["id"] for m in killed_equiv],
            "equivalent_ids_not_in_catalogue": unknown}


def print_report(rep, show_diffs=True, out=sys.stdout):
    s = rep["summary"]
    w = out.write
    w("mutation report for %s\n" % rep["kernel_dir"])
    w("  mutants listed %d, built %d, stillborn (did not compile) %d, unreachable %d, not built %d\n" %
      (s["listed"], s["built"], s["stillborn"], s["unreachable"], s["not_built"]))
    w("  tested %d: killed %d, survived %d (of which declared equivalent %d); could not test (125) %d; not run %d\n" %
      (s["tested"], s["killed"], s["survived"], s["equivalent"], s["untestable"], s["not_run"]))
    if s["score"] is None:
        w("  score: n/a (nothing tested)\n")
    else:
        w("  score = killed / (tested - equivalent) = %d / %d = %.1f%%\n" %
          (s["killed"], s["tested"] - s["equivalent"], 100.0 * s["score"]))
    w("  per operator (killed / survived / equivalent / not scored):\n")
    for op in sorted(rep["per_op"]):
        c = rep["per_op"][op]
        w("    %-7s %4d %4d %4d %4d\n" % (op, c["killed"], c["survived"], c["equivalent"], c["other"]))
    if rep["declared_equivalent_but_killed"]:
        w("  WARNING declared equivalent but killed (not equivalent): %s\n" % ", ".join(rep["declared_equivalent_but_killed"]))
    if rep["equivalent_ids_not_in_catalogue"]:
        w("  WARNING equivalent.txt names unknown ids: %s\n" % ", ".join(rep["equivalent_ids_not_in_catalogue"]))
    if rep["untestable"]:
        w("  could not test (exit 125): %s\n" % ", ".join(u["id"] for u in rep["untestable"]))
    if rep["stillborn"]:
        w("  stillborn: %s\n" % ", ".join(rep["stillborn"]))
    w("  survivors (%d):\n" % len(rep["survivors"]))
    for sv in rep["survivors"]:
        w("    %s  %s:%d  %s\n" % (sv["id"], sv["file"], sv["line"], sv["description"]))
        if show_diffs:
            for l in sv["diff"].splitlines()[2:]:
                w("        %s\n" % l)


# ---------------------------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------------------------

def source_root(args):
    if args.root:
        return os.path.realpath(args.root)
    here = os.path.dirname(os.path.realpath(__file__))
    return os.path.realpath(os.path.join(here, "..", ".."))


def selected(args):
    ops = None
    if args.ops == "all":
        ops = list(OPERATORS)
    elif args.ops:
        ops = args.ops.split(",")
    ids = None
    if args.ids:
        ids = []
        for tok in args.ids.split(","):
            if os.path.isfile(tok):
                with open(tok) as f:
                    ids += [l.split()[0] for l in f if l.strip() and not l.startswith("#")]
            else:
                ids.append(tok)
    return enumerate_mutants(source_root(args), args.kernel_dir, args.also, ops, args.sample, args.sample_seed, ids)


def check_work_kind(work, args):
    """Built objects are reused by id: perturbed and plain mutants must not share a work folder."""
    perturb = bool(getattr(args, "perturb", False))
    old = read_json(os.path.join(work, "mutants.json")) or {"mutants": []}
    if old["mutants"] and bool(old.get("perturb", False)) != perturb:
        raise SystemExit("mutate.py: %s holds %s mutants; use another --work for %s ones" %
                         (work, "perturbed" if old.get("perturb") else "plain", "perturbed" if perturb else "plain"))
    return perturb


def make_plan(root, args):
    check_work_kind(args.work, args)
    if args.perturb and not args.plugin:
        # A flashcheck relinked with perturbed kernel objects would mix two layouts of FwdParams
        # (the perturbed one has a field more) across inline functions the kernels share.
        raise SystemExit("mutate.py: --perturb builds plugin modules only: add --plugin")
    if not args.plugin:
        return plan_build(root, args.base, args.target, args.kernel_dir)
    plan = plan_plugin(root, args.base, args.kernel_dir, args.work, args.plugin_arch, args.plugin_suffix, args.cudart,
                       args.jobs, ["FLASHCHECK_PERTURB=1"] if args.perturb else [])
    # The unmutated module is the baseline: every check must pass on it before a mutant is scored.
    if getattr(args, "check", None) and not args.baseline:
        args.baseline = os.path.join(plan.link_cwd, plan.target)
    return plan


def cmd_list(args):
    ms = selected(args)
    if args.json:
        json.dump([asdict(m) for m in ms], sys.stdout, indent=1)
        print()
        return 0
    for m in ms:
        print("%-28s %s:%d  %s" % (m.id, m.file, m.line, m.description))
        if args.diff:
            print("\n".join("    " + l for l in m.diff.splitlines()[2:]))
    counts = {}
    for m in ms:
        counts[m.op] = counts.get(m.op, 0) + 1
    print("%d mutants: %s" % (len(ms), ", ".join("%s %d" % kv for kv in sorted(counts.items()))))
    return 0


def cmd_apply(args):
    root = source_root(args)
    ms = enumerate_mutants(root, args.kernel_dir, args.also, None, None, 0, [args.id])
    m = ms[0]
    if not args.into:
        sys.stdout.write(m.diff)
        return 0
    path = os.path.join(args.into, m.file)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    with open(os.path.join(root, m.file), encoding="utf-8") as f:
        if f.read() != text:
            raise SystemExit("mutate.py: %s differs from the source the mutant was listed from" % path)
    with open(path, "w", encoding="utf-8") as f:
        f.write(apply_mutant(text, m))
    print("applied %s to %s: %s" % (m.id, path, m.description))
    return 0


def cmd_build(args):
    root = source_root(args)
    ms = shard(selected(args), args.shard)
    plan = make_plan(root, args)
    save_catalogue(args.work, ms, args)
    if args.dry_run:
        build_one(plan, ms[0], args.work, args.kernel_dir, args.also, dry_run=True)
        return 0
    todo = [m for m in ms if args.rebuild or (read_json(os.path.join(args.work, m.id, "build.json")) or {}).get("status") is None]
    print("building %d mutants (%d already built) with -j %d" % (len(todo), len(ms) - len(todo), args.jobs), flush=True)
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as ex:
        futs = {ex.submit(build_one, plan, m, args.work, args.kernel_dir, args.also, args.keep): m for m in todo}
        for k, f in enumerate(concurrent.futures.as_completed(futs), 1):
            r = f.result()
            print("[%d/%d] %s %s %.1fs" % (k, len(todo), r["id"], r["status"], r["seconds"]), flush=True)
    built = [read_json(os.path.join(args.work, m.id, "build.json")) for m in todo]
    secs = [b["seconds"] for b in built if b and b.get("status") == "built"]
    print("built %d in %.0fs wall (mean %.1fs per mutant, one job each)" %
          (len(secs), time.time() - t0, sum(secs) / len(secs) if secs else 0.0))
    return 0


def cmd_run(args):
    env = check_env(args.jobs)
    if not run_baseline(args, env):
        return 2
    cat = read_json(os.path.join(args.work, "mutants.json"))
    if not cat:
        raise SystemExit("mutate.py: no mutants.json in %s" % args.work)
    ids = shard([m["id"] for m in cat["mutants"]], args.shard)
    todo = []
    for i in ids:
        d = os.path.join(args.work, i)
        if (read_json(os.path.join(d, "build.json")) or {}).get("status") != "built":
            continue
        if not args.rerun and read_json(os.path.join(d, "result.json")):
            continue
        todo.append((i, d))
    deadline = time.time() + args.deadline if args.deadline else None
    print("running checks on %d mutants with -j %d" % (len(todo), args.jobs), flush=True)
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as ex:
        futs = []
        for i, d in todo:
            futs.append(ex.submit(lambda i=i, d=d: None if deadline and time.time() > deadline
                                  else run_one(i, d, args.check, args.timeout, env)))
        for k, f in enumerate(concurrent.futures.as_completed(futs), 1):
            r = f.result()
            if r:
                print("[%d/%d] %s %s %s" % (k, len(todo), r["id"], r["status"], r.get("killed_by", "")), flush=True)
    return 0


def cmd_all(args):
    """Build and run as one pipeline: each mutant's checks start as soon as it is linked, so one
    call of a few minutes does both. Stops starting work at --deadline; everything is resumable."""
    root = source_root(args)
    env = check_env(args.run_jobs)
    t_start = time.time()
    deadline = t_start + args.deadline if args.deadline else None
    ms = shard(selected(args), args.shard)
    plan = make_plan(root, args)
    save_catalogue(args.work, ms, args)
    if not run_baseline(args, env):
        return 2
    ready = queue.Queue()
    lock = threading.Lock()
    done = {"built": 0, "ran": 0}

    def late():
        return deadline is not None and time.time() > deadline

    def build_task(m):
        d = os.path.join(args.work, m.id)
        b = read_json(os.path.join(d, "build.json"))
        if b is None or args.rebuild:
            if late():
                return
            b = build_one(plan, m, args.work, args.kernel_dir, args.also, args.keep)
            with lock:
                done["built"] += 1
                print("built %s %s %.1fs" % (m.id, b["status"], b["seconds"]), flush=True)
        if b.get("status") == "built" and (args.rerun or read_json(os.path.join(d, "result.json")) is None):
            ready.put((m.id, d))

    def run_worker():
        while True:
            item = ready.get()
            if item is None:
                return
            if late():
                continue
            r = run_one(item[0], item[1], args.check, args.timeout, env)
            with lock:
                done["ran"] += 1
                print("ran %s %s %s" % (r["id"], r["status"], r.get("killed_by", "")), flush=True)

    runners = [threading.Thread(target=run_worker, daemon=True) for _ in range(args.run_jobs)]
    for t in runners:
        t.start()
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as ex:
        list(ex.map(build_task, ms))
    for _ in runners:
        ready.put(None)
    for t in runners:
        t.join()
    print("pipeline: built %d, ran %d in %.0fs%s" % (done["built"], done["ran"], time.time() - t_start,
                                                    " (deadline reached: call again to resume)" if late() else ""))
    rep = compute_report(args.work, read_equivalent(args.equivalent))
    print_report(rep, show_diffs=True)
    return 0


def cmd_report(args):
    rep = compute_report(args.work, read_equivalent(args.equivalent))
    if args.json:
        with (sys.stdout if args.json == "-" else open(args.json, "w")) as f:
            json.dump(rep, f, indent=1)
    if args.json != "-":
        print_report(rep, show_diffs=not args.no_diffs)
    if args.min_score is not None and (rep["summary"]["score"] is None or rep["summary"]["score"] < args.min_score):
        return 1
    return 0


# ---------------------------------------------------------------------------------------------
# Self-test
# ---------------------------------------------------------------------------------------------

TOY_KERNEL = r'''// toy kernel: comments like a < b, __syncthreads(); and if (x) must never be mutated
#include "toy/util.h"
#define LIMIT(a) ((a) < 4)
/* block comment: cp_async_wait<0>(); fmaxf(a, b) */
static_assert(sizeof(int) >= 4, "int < 32 bits");
int body(int n, int* out, float* f) {
  const char* s = "x < y && __syncthreads();";
  int acc = 0;
  for (int i = 0; i < n; ++i) {
    if (i >= n - 1) acc += out[i + 1];
    acc += out[(i * 3) ^ (i & 7)];
  }
  f[0] = fmaxf(f[1], f[2]) * f[3];
  f[1] *= f[4];
  __syncthreads();
  cp_async_wait<1>();
  cp_async_commit();
  asm volatile("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(acc) : "f"(f[0]), "f"(f[1]));
  unsigned v = __floats2bfloat162_rn(f[0], f[1]);
  return acc == 0 && n != 2 ? -INFINITY : (acc >> 2) / n;
}
'''

# The async-race class (REL, wgmma WAIT) and the perturbed build's code, which is never mutated.
TOY_ASYNC = r'''__device__ void consume(int n) {
  for (int t = 0; t < n; ++t) {
    gemm();
    wgmma::commit();
    wgmma::wait<1>();
    sync::mbar_arrive(sm.k_empty(t));
    work();
    wgmma::wait<0>();
    sync::mbar_arrive(sm.v_empty(t));
  }
  wgmma::wait<0>();
  pipeline.consumer_release(state);
#ifdef FLASHCHECK_PERTURB
  if (n < 3) perturb::on_use(1);
#else
  int x = a < b;
#endif
#ifndef FLASHCHECK_PERTURB
  int y = c < d;
#else
  int z = e < f;
#endif
}
'''


def selftest_async(tmp, check):
    os.makedirs(os.path.join(tmp, "toy_async"))
    with open(os.path.join(tmp, "toy_async", "a.cuh"), "w") as f:
        f.write(TOY_ASYNC)
    ms = enumerate_mutants(tmp, "toy_async", ops=list(OPERATORS))
    by_op = {}
    for m in ms:
        by_op.setdefault(m.op, []).append(m)
    rel = sorted(m.description for m in by_op.get("REL", []))
    check(rel == sorted(["`sync::mbar_arrive(sm.k_empty(t));` moved above `wgmma::wait<1>();`",
                         "`sync::mbar_arrive(sm.v_empty(t));` moved above `wgmma::wait<0>();`",
                         "`sync::mbar_arrive(sm.v_empty(t));` moved above `wgmma::wait<1>();`",
                         "`pipeline.consumer_release(state);` moved above `wgmma::wait<0>();`"]), "REL mutants: %s" % rel)
    m = [x for x in by_op["REL"] if "k_empty" in x.description][0]
    out = apply_mutant(TOY_ASYNC, m)
    check("    sync::mbar_arrive(sm.k_empty(t));\n    wgmma::wait<1>();\n    work();" in out, "REL moves the line:\n" + out)
    check(out.count("\n") == TOY_ASYNC.count("\n") and sorted(out.split("\n")) == sorted(TOY_ASYNC.split("\n")),
          "REL only reorders lines")
    waits = sorted(m.description for m in by_op.get("WAIT", []))
    check(waits == sorted(["`wait<1>` -> `wait<2>` (shallower)", "`wait<0>` -> `wait<1>` (shallower)",
                           "`wait<0>` -> `wait<1>` (shallower)", "`wgmma::wait<1>()` removed",
                           "`wgmma::wait<0>()` removed", "`wgmma::wait<0>()` removed"]), "wgmma WAIT mutants: %s" % waits)
    removed = [x for x in by_op["WAIT"] if x.description == "`wgmma::wait<1>()` removed"][0]
    check("wgmma::wait<1>" not in apply_mutant(TOY_ASYNC, removed) and "  \n" in apply_mutant(TOY_ASYNC, removed),
          "the qualifier goes with the removed wait")
    # Instrumentation (#ifdef FLASHCHECK_PERTURB, the #else of #ifndef) is left alone; the normal
    # build's branches are mutated.
    ror = sorted(m.description + "@" + str(m.line) for m in by_op.get("ROR", []))
    check([r.split("@")[1] for r in ror] == ["16", "19", "2"], "ROR only on lines 2, 16, 19: %s" % ror)
    check("COND" not in by_op, "no COND inside #ifdef FLASHCHECK_PERTURB: %s" % by_op.get("COND"))


def selftest(flashcheck_build=None):
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)
            print("FAIL:", what)

    tmp = tempfile.mkdtemp(prefix="mutate-selftest-")
    try:
        os.makedirs(os.path.join(tmp, "toy"))
        with open(os.path.join(tmp, "toy", "k.cu"), "w") as f:
            f.write(TOY_KERNEL)
        with open(os.path.join(tmp, "toy", "util.h"), "w") as f:
            f.write("#pragma once\n// nothing to mutate: a < b\n")
        ms = enumerate_mutants(tmp, "toy", ops=list(OPERATORS))
        by_op = {}
        for m in ms:
            by_op.setdefault(m.op, []).append(m)
        # Comments, strings, preprocessor lines and static_assert are never touched.
        for m in ms:
            line = TOY_KERNEL.split("\n")[m.line - 1]
            check(not line.lstrip().startswith(("//", "/*", "#", "static_assert")), "mutant on an excluded line: %s" % m.description)
            check(m.line != 7 or m.op in ("RND",), "mutant inside the string literal on line 7: %s %s" % (m.op, m.description))
        expected = {"ROR": 2, "NEG": 2, "LOG": 1, "BND": 2, "OBO": 2, "SYNC": 1, "WAIT": 2, "COMMIT": 1, "RND": 2,
                    "MAXMIN": 1, "MUL": 2, "ADDR": 1, "DIV": 1, "SWZ": 1, "MASK": 1, "SHIFT": 1, "IDX": 2, "INF": 1, "COND": 2}
        for op, n in expected.items():
            check(len(by_op.get(op, [])) == n, "%s: expected %d mutants, got %d: %s" %
                  (op, n, len(by_op.get(op, [])), [m.description for m in by_op.get(op, [])]))
        check(set(by_op) <= set(expected), "unexpected operators: %s" % (set(by_op) - set(expected)))
        # Each mutant is one small change: its diff removes and adds exactly one line.
        for m in ms:
            body = m.diff.splitlines()[2:]
            minus = [l for l in body if l.startswith("-")]
            plus = [l for l in body if l.startswith("+")]
            check(len(minus) == 1 and len(plus) == 1, "%s changes more than one line:\n%s" % (m.id, m.diff))
        descs = {m.op + ":" + m.description for m in ms}
        for want in ("ROR:`<` -> `<=`", "WAIT:`cp_async_wait<1>` -> `cp_async_wait<2>` (shallower)",
                     "RND:PTX `cvt.rn` -> `cvt.rz` (truncates)", "INF:`-INFINITY` -> `-2^30`",
                     "BND:bound `< n` -> `< n - 1`", "SWZ:` ^ (i & 7)` dropped", "MUL:`f[1] *= f[4];` removed",
                     "MAXMIN:`fmaxf` -> `fminf`", "DIV:` / n` dropped"):
            check(want in descs, "missing mutant %s" % want)
        rnd = [m for m in ms if m.op == "RND" and "__floats2bfloat162_rn" in m.description][0]
        check("__halves2bfloat162(__float2bfloat16_rz(f[0]), __float2bfloat16_rz(f[1]))" in apply_mutant(TOY_KERNEL, rnd),
              "pair conversion rewritten as two truncations")
        # Ids are unique and stable: an edit elsewhere in the file changes none of them.
        ids = [m.id for m in ms]
        check(len(ids) == len(set(ids)), "duplicate ids")
        with open(os.path.join(tmp, "toy", "k.cu"), "w") as f:
            f.write("// a new first line\n\n" + TOY_KERNEL)
        ms2 = enumerate_mutants(tmp, "toy", ops=list(OPERATORS))
        check(sorted(ids) == sorted(m.id for m in ms2), "ids changed after an unrelated edit")
        check(all(a.line + 2 == b.line for a, b in zip(sorted(ms, key=lambda m: m.id), sorted(ms2, key=lambda m: m.id))),
              "lines follow the edit")
        # Sampling is by id: the same seed picks the same mutants after the edit.
        s1 = [m.id for m in enumerate_mutants(tmp, "toy", sample=5, sample_seed=3)]
        with open(os.path.join(tmp, "toy", "k.cu"), "w") as f:
            f.write(TOY_KERNEL)
        s2 = [m.id for m in enumerate_mutants(tmp, "toy", sample=5, sample_seed=3)]
        check(sorted(s1) == sorted(s2) and len(s1) == 5, "sample not stable")
        # apply: the mutated copy differs in exactly the described place.
        m = [x for x in ms if x.op == "SYNC"][0]
        out = apply_mutant(TOY_KERNEL, m)
        check(out.count("__syncthreads();") == TOY_KERNEL.count("__syncthreads();") - 1, "SYNC apply")
        # run + report on fabricated builds: shell scripts stand in for mutant binaries.
        work = os.path.join(tmp, "work")
        ns = argparse.Namespace(kernel_dir="toy", also=[])
        save_catalogue(work, ms[:7], ns)
        behaviours = ["exit 1", "exit 0", "exit 0", "exit 125", "sleep 30", "kill -SEGV $$", None]
        for m, beh in zip(ms[:7], behaviours):
            d = os.path.join(work, m.id)
            os.makedirs(d)
            if beh is None:
                write_json(os.path.join(d, "build.json"), {"id": m.id, "status": "build_failed", "seconds": 0})
                continue
            exe = os.path.join(d, "fakebin")
            with open(exe, "w") as f:
                f.write("#!/bin/bash\n%s\n" % beh)
            os.chmod(exe, 0o755)
            write_json(os.path.join(d, "build.json"), {"id": m.id, "status": "built", "seconds": 0.1, "binary": "fakebin"})
        env = check_env(1)
        for m in ms[:6]:
            run_one(m.id, os.path.join(work, m.id), ["{bin}"], 2, env)
        status = [read_json(os.path.join(work, m.id, "result.json"))["status"] for m in ms[:6]]
        check(status == ["killed", "survived", "survived", "untestable", "killed", "killed"], "run statuses %s" % status)
        check("timeout" in read_json(os.path.join(work, ms[4].id, "result.json"))["killed_by"], "timeout named")
        eq_path = os.path.join(tmp, "equivalent.txt")
        with open(eq_path, "w") as f:
            f.write("# id reason\n%s the change is dead code\n" % ms[2].id)
        rep = compute_report(work, read_equivalent(eq_path))
        s = rep["summary"]
        check((s["killed"], s["survived"], s["equivalent"], s["untestable"], s["stillborn"]) == (3, 2, 1, 1, 1),
              "report counts %s" % s)
        check(abs(s["score"] - 3 / 4) < 1e-12, "score = 3 / (5 - 1), got %s" % s["score"])
        check([x["id"] for x in rep["survivors"]] == [ms[1].id], "survivors %s" % rep["survivors"])
        import io
        buf = io.StringIO()
        print_report(rep, out=buf)
        check("3 / 4 = 75.0%" in buf.getvalue() and ms[1].id in buf.getvalue(), "printed report:\n" + buf.getvalue())
        selftest_async(tmp, check)
        # build: a toy CMake project where the "kernel" is one library object; the mutants relink
        # the executable with only their object recompiled.
        if shutil.which("cmake") and shutil.which("cc"):
            selftest_build(tmp, check)
        else:
            print("skip: build self-test needs cmake and cc")
        if flashcheck_build:
            selftest_plugin(tmp, check, flashcheck_build)
        else:
            print("skip: plugin-module self-test needs --flashcheck BUILD (a flashcheck build dir with compile commands)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("selftest: %s (%d failure%s)" % ("FAILED" if failures else "ok", len(failures), "" if len(failures) == 1 else "s"))
    return 1 if failures else 0


def selftest_plugin(tmp, check, build):
    """--plugin on the host kernel folder gpu/plugin/host_module: its mutants become modules that an
    unmutated flashcheck loads; the unmutated module passes a CPU campaign and a real fault dies."""
    root = os.path.realpath(os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", ".."))
    fc = os.path.join(build, "flashcheck")
    if not os.path.exists(fc):
        check(False, "plugin self-test: %s not built" % fc)
        return
    kd = "gpu/plugin/host_module"
    ms = enumerate_mutants(root, kd, ops=["ROR", "DIV", "MAXMIN"])
    # DIV: `h / group` -> `h` reads KV head h instead of h / group: wrong for every GQA problem (and
    # out of bounds past heads_kv), so a 40-case CPU campaign must kill it.
    want = [m for m in ms if m.op == "DIV" and "/ group" in m.description]
    check(len(want) == 1, "host_module: one DIV mutant of `h / group`, got %s" % [m.description for m in ms])
    if not want:
        return
    work = os.path.join(tmp, "pwork")
    args = argparse.Namespace(plugin=True, base=build, kernel_dir=kd, work=work, plugin_arch="90a",
                              plugin_suffix=".mutant", cudart="shared", jobs=2, check=["x"], baseline=None,
                              target="flashcheck")
    plan = make_plan(root, args)
    check(os.path.basename(args.baseline) == "host_module.so" and os.path.exists(args.baseline),
          "the unmutated module is the baseline: %s" % args.baseline)
    check({os.path.basename(t["file"]) for t in plan.tus} == {"host_attention.cpp", "register.cpp"},
          "module TUs %s" % [t["file"] for t in plan.tus])
    r = build_one(plan, want[0], work, kd, [])
    check(r["status"] == "built", "the DIV module builds: %s" % r.get("why", r))
    lib = os.path.join(work, want[0].id, "host_module.so")
    nm = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True).stdout.split()
    check("flashcheck_get_kernel" in nm and not any("registered_kernels" in x for x in nm),
          "a module exports the entry point alone: %s" % nm)
    cmd = ("%s run --plugin {bin} --kernel host_attention.mutant --cases 40 --seed 3 --max-seq 96 --no-shrink --fail-fast"
           % shlex.quote(fc))
    env = check_env(1)
    v, rc, _, tail = run_check(cmd.replace("{bin}", shlex.quote(args.baseline)), 300, env)
    check(v == "pass", "the unmutated module passes a CPU campaign (rc=%s):\n%s" % (rc, tail[-1500:]))
    res = run_one(want[0].id, os.path.join(work, want[0].id), [cmd], 300, env)
    check(res["status"] == "killed" and res["checks"][0]["rc"] == 1,
          "the GQA fault is killed by the campaign: %s" % {k: res[k] for k in ("status", "checks")})


def selftest_build(tmp, check):
    proj = os.path.join(tmp, "proj")
    os.makedirs(os.path.join(proj, "kern"))
    os.makedirs(os.path.join(proj, "app"))
    with open(os.path.join(proj, "CMakeLists.txt"), "w") as f:
        f.write("cmake_minimum_required(VERSION 3.16)\nproject(toy C)\n"
                "add_library(kern STATIC kern/k.c app/other.c)\n"
                "target_include_directories(kern PUBLIC ${PROJECT_SOURCE_DIR})\n"
                "add_executable(toy app/main.c)\ntarget_link_libraries(toy PRIVATE kern)\n")
    with open(os.path.join(proj, "kern", "k.h"), "w") as f:
        f.write("#pragma once\nstatic inline int limit(void) { return 10; }\nint count(int n);\n")
    with open(os.path.join(proj, "kern", "k.c"), "w") as f:
        f.write('#include "kern/k.h"\nint count(int n) {\n  int c = 0;\n  for (int i = 0; i < n; ++i) c += i < limit();\n  return c;\n}\n')
    with open(os.path.join(proj, "app", "other.c"), "w") as f:
        f.write("int other(void) { return 7; }\n")
    with open(os.path.join(proj, "app", "main.c"), "w") as f:
        f.write('#include <stdio.h>\n#include "kern/k.h"\nint other(void);\n'
                'int main(void) { printf("%d %d\\n", count(12), other()); return 0; }\n')
    base = os.path.join(tmp, "base")
    q = dict(stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    if subprocess.call(["cmake", "-S", proj, "-B", base, "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"], **q) or \
            subprocess.call(["cmake", "--build", base, "--target", "toy"], **q):
        check(False, "toy base build")
        return
    plan = plan_build(proj, base, "toy", "kern")
    check([os.path.basename(t["file"]) for t in plan.tus] == ["k.c"], "only the kernel's TU is rebuilt")
    ms = enumerate_mutants(proj, "kern", ops=["ROR", "OBO"])
    work = os.path.join(tmp, "bwork")
    results = {m.id: build_one(plan, m, work, "kern", []) for m in ms}
    check(all(r["status"] == "built" for r in results.values()), "toy mutants build: %s" % results)
    outputs = []
    for m in ms:
        exe = os.path.join(work, m.id, "toy")
        outputs.append(subprocess.run([exe], capture_output=True, text=True).stdout.strip())
        left = sorted(os.listdir(os.path.join(work, m.id)))
        check(left == ["build.json", "build.log", "diff.patch", "toy"], "only the binary and logs are kept: %s" % left)
    # The base prints "10 7". `i < n` -> `i <= n` adds i = 12, which is not < 10: still "10 7" (an
    # equivalent mutant); `i < limit()` -> `i <= limit()` counts 11. other.c is not rebuilt: "7".
    check(sorted(outputs) == ["10 7", "11 7"], "mutant outputs %s" % outputs)
    check(subprocess.run([os.path.join(base, "toy")], capture_output=True, text=True).stdout.strip() == "10 7",
          "the base binary is untouched")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)

    def selection(sp):
        sp.add_argument("--kernel-dir", required=True, help="kernel folder relative to the source root, e.g. gpu/mma_f16")
        sp.add_argument("--also", action="append", help="another file to mutate (e.g. gpu/common/mask.cuh); "
                        "only the kernel's translation units that include it see the change")
        sp.add_argument("--root", help="source root (default: two folders above this script)")
        sp.add_argument("--ops", help="comma-separated operator codes, or `all` (default: all but %s): %s" %
                        (",".join(OPT_IN), ",".join(OPERATORS)))
        sp.add_argument("--ids", help="comma-separated mutant ids, or a file of them (first word per line)")
        sp.add_argument("--sample", type=int, help="keep N mutants chosen by a hash of their ids")
        sp.add_argument("--sample-seed", type=int, default=0)

    sp = sub.add_parser("list", help="print the mutants")
    selection(sp)
    sp.add_argument("--diff", action="store_true", help="print each mutant's diff")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(fn=cmd_list)

    sp = sub.add_parser("apply", help="print one mutant's diff, or apply it to a copy of the tree")
    sp.add_argument("--kernel-dir", required=True)
    sp.add_argument("--also", action="append")
    sp.add_argument("--root")
    sp.add_argument("--id", required=True)
    sp.add_argument("--into", help="root of a copy of the source tree to modify in place")
    sp.set_defaults(fn=cmd_apply)

    def building(sp):
        sp.add_argument("--base", required=True, help="pre-built CMake build dir (CMAKE_EXPORT_COMPILE_COMMANDS=ON)")
        sp.add_argument("--target", default="flashcheck")
        sp.add_argument("--work", required=True, help="one folder per mutant is made here")
        sp.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, help="parallel builds")
        sp.add_argument("--keep", action="store_true", help="keep the mutated sources and objects")
        sp.add_argument("--rebuild", action="store_true", help="rebuild mutants already built")
        sp.add_argument("--shard", help="i/N: this call takes mutants k with k %% N == i")
        sp.add_argument("--plugin", action="store_true",
                        help="build each mutant as a small plugin library (kernel TUs + gpu/plugin/kernel_module.cpp) "
                             "for an unmutated flashcheck to load with --plugin, instead of a whole --target binary")
        sp.add_argument("--plugin-arch", default="90a", help="with --plugin: the one CUDA arch compiled (default 90a)")
        sp.add_argument("--plugin-suffix", default=".mutant",
                        help="with --plugin: appended to the kernel's name (default .mutant: mma_f16.mutant)")
        sp.add_argument("--perturb", action="store_true",
                        help="with --plugin: build against the perturbed build (-DFLASHCHECK_PERTURB=1 on every "
                             "compile: race instrumentation, gpu/common/perturb.h); use its own --work folder")
        sp.add_argument("--cudart", choices=("shared", "static"), default="shared",
                        help="with --plugin: link the CUDA runtime shared (libcudart.so beside flashcheck or on the "
                             "library path; smallest) or static (self-contained, ~1 MB more per mutant)")

    def running(sp):
        sp.add_argument("--check", action="append", required=True,
                        help="shell command; {bin} is the mutant's binary, {id} its id, {dir} its folder. "
                             "Exit 0 passes, 1 kills, 125 cannot test, anything else (crash) kills")
        sp.add_argument("--timeout", type=float, default=120, help="seconds per check; past it the mutant is killed")
        sp.add_argument("--baseline", help="the unmutated binary: every check must pass on it first")
        sp.add_argument("--rerun", action="store_true", help="run mutants that already have a result")
        sp.add_argument("--deadline", type=float, help="seconds from now after which no new work starts")

    sp = sub.add_parser("build", help="build each mutant's binary")
    selection(sp)
    building(sp)
    sp.add_argument("--dry-run", action="store_true", help="print the first mutant's commands only")
    sp.set_defaults(fn=cmd_build)

    sp = sub.add_parser("run", help="run checks on built mutants")
    sp.add_argument("--work", required=True)
    sp.add_argument("-j", "--jobs", type=int, default=4, help="mutants checked at once (they share the GPU)")
    sp.add_argument("--shard")
    running(sp)
    sp.set_defaults(fn=cmd_run)

    sp = sub.add_parser("all", help="build and run in one pipeline, then report")
    selection(sp)
    building(sp)
    running(sp)
    sp.add_argument("--run-jobs", type=int, default=4, help="mutants checked at once")
    sp.add_argument("--equivalent", help="file of `ID reason` lines")
    sp.set_defaults(fn=cmd_all)

    sp = sub.add_parser("report", help="score and survivors")
    sp.add_argument("--work", required=True)
    sp.add_argument("--equivalent", help="file of `ID reason` lines: mutants argued equivalent")
    sp.add_argument("--json", help="write the report as JSON to PATH, or - for stdout only")
    sp.add_argument("--no-diffs", action="store_true")
    sp.add_argument("--min-score", type=float, help="exit 1 if the score is below this fraction")
    sp.set_defaults(fn=cmd_report)

    sp = sub.add_parser("selftest", help="test the lexer, operators, ids, apply, build, run and report")
    sp.add_argument("--flashcheck", help="a flashcheck build dir (compile commands, flashcheck, host_kernel_module "
                                         "configured): also test --plugin on gpu/plugin/host_module")
    sp.set_defaults(fn=lambda a: selftest(a.flashcheck and os.path.abspath(a.flashcheck)))

    args = p.parse_args(argv)
    # Commands run in the base build's folders: every path handed to them must be absolute.
    for name in ("work", "base", "baseline", "equivalent"):
        if getattr(args, name, None):
            setattr(args, name, os.path.abspath(getattr(args, name)))
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
