"""The mutants of a kernel folder: its source files, each operator's changes to them as Mutant
records with ids that survive edits elsewhere in the file, sampling and sharding of the list, and
applying one mutant to a text."""
import difflib
import hashlib
import os
import re
from dataclasses import dataclass

from .lexer import classify
from .operators import OPERATORS


SOURCE_EXTS = (".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc", ".c")


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


def is_test_file(name):
    return os.path.splitext(os.path.basename(name))[0].endswith("_test")


def source_files(root, kernel_dir, also):
    files = []
    kd = os.path.join(root, kernel_dir)
    if not os.path.isdir(kd):
        raise SystemExit("mutate: kernel folder %s does not exist under %s" % (kernel_dir, root))
    for dirpath, _, names in os.walk(kd):
        for n in sorted(names):
            # Tests beside the code (vt_layout_test.cpp) are not the kernel: never mutated or built into it.
            if n.endswith(SOURCE_EXTS) and not is_test_file(n):
                files.append(os.path.relpath(os.path.join(dirpath, n), root))
    for a in also or []:
        if not os.path.isfile(os.path.join(root, a)):
            raise SystemExit("mutate: --also file %s does not exist under %s" % (a, root))
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


def original_line(m):
    """The text of the line a mutant changes, as it was (its diff's first removed line)."""
    for l in m.diff.splitlines()[2:]:
        if l.startswith("-"):
            return l[1:]
    return ""


def enumerate_mutants(root, kernel_dir, also=None, ops=None, sample=None, sample_seed=0, ids=None, only=None,
                      match=None):
    """`only`: keep the mutants of these files (relative to root); `match`: of lines matching this
    regular expression. Both narrow the catalogue before `sample` draws from it."""
    ops = ops or [o for o in OPERATORS if o not in OPT_IN or ids]
    for o in ops:
        if o not in OPERATORS:
            raise SystemExit("mutate: unknown operator %s (known: %s)" % (o, ", ".join(OPERATORS)))
    files = source_files(root, kernel_dir, also)
    if only:
        want = {os.path.normpath(f) for f in only}
        unknown = sorted(want - set(files))
        if unknown:
            raise SystemExit("mutate: --only %s is not a file of %s or an --also file" % (", ".join(unknown), kernel_dir))
        files = [f for f in files if f in want]
    try:
        pattern = re.compile(match) if match else None
    except re.error as e:
        raise SystemExit("mutate: --match %r is not a regular expression: %s" % (match, e))
    out = []
    for rel in files:
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            out.extend(mutants_of_file(rel, f.read(), ops))
    if pattern:
        out = [m for m in out if pattern.search(original_line(m))]
    if ids:
        want = set(ids)
        out = [m for m in out if m.id in want]
        missing = want - {m.id for m in out}
        if missing:
            raise SystemExit("mutate: no such mutant id: %s" % ", ".join(sorted(missing)))
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
        raise SystemExit("mutate: --shard wants i/N with 0 <= i < N, got %s" % spec)
    return [x for k, x in enumerate(items) if k % n == i]
