"""Mutation testing for one kernel folder: how many small, realistic faults does a check catch?

Each mutant is one small textual change to the kernel's sources (a flipped bound, a dropped
barrier, a shallower cp.async wait, truncating instead of rounding, ...), with an id that stays
the same while the line it changes does. Run as `python3 tools/mutate MODE ...`; modes (see
tools/mutate/MUTATION.md):

  list     print the mutants (id, file:line, description)
  apply    show one mutant's diff, or apply it to a copy of the tree (--root)
  build    build every mutant's binary from a pre-built base build dir, in parallel (--plugin: as
           plugin modules; --plugin-backward: modules exporting the kernel's backward pass)
  run      run check commands on every built mutant: exit 1, a crash or a timeout kills it
  all      build and run in one pipeline under a deadline (one device call), then report
  report   score = killed / (tested - equivalent), survivors with their diffs
  selftest check the lexer, the operators, ids, apply, build, run and report on toy sources

The package, one role per module: lexer (code, comments, strings; operand extents), operators (the
catalogue), sources (the mutants of a folder), build and plugin (a mutant as a relinked binary or as
a plugin module), run (checks), report (score, survivors), store (the work folder's JSON), commands
(the modes), cli (the command line), selftest. Python 3 standard library only.
"""
