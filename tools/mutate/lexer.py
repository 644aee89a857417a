"""Which characters of a C++/CUDA source are code, comment, string or preprocessor, and the extents
of operands: what the operators need so that they only ever touch code (a flipped `<` in a comment
is an equivalent mutant that costs a build) and never the perturbed build's instrumentation."""
import re


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
