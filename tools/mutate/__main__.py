"""`python3 tools/mutate MODE ...` (the folder run as a program) and `python3 -m mutate` with tools/
on the path: the mutation tool's command line (mutate/cli.py)."""
import os
import sys

if __package__ in (None, ""):
    # Run as a folder, this file is a top-level script: its package is imported by name from the
    # folder above, so the modules' relative imports resolve.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from mutate.cli import main
else:
    from .cli import main

sys.exit(main())
