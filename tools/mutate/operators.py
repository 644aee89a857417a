"""The catalogue of mutation operators. Each operator yields (start, end, replacement,
description) on one file's text, registered under its code (ROR, SYNC, WAIT, ...) with a summary."""
import re

from .lexer import SIMPLE_OPERAND, all_class, code_matches, match_paren, operand_after, rhs_extent


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
