#!/usr/bin/env python3
"""One line for a campaign's JSON report, for the device scripts' summary tables: per kernel the
cases passed, failed and skipped and the failures by criterion.

    campaign_summary.py REPORT.json [--names]     (--names: each kernel's name first)
"""
import json
import sys


def main():
    path, names = sys.argv[1], "--names" in sys.argv[2:]
    try:
        with open(path) as f:
            j = json.load(f)
    except Exception as e:  # a missing or cut report is a line that says so, never a crash
        print("no JSON (%s)" % e.__class__.__name__)
        return
    parts = []
    for v in j.get("variants", []):
        fb = v.get("failed_by") or {}
        counts = "%s pass %s fail %s skip%s" % (v.get("passed"), v.get("failed"), v.get("skipped"),
                                                (" " + ",".join("%s=%s" % kv for kv in fb.items())) if fb else "")
        parts.append("%s: %s" % (v.get("name"), counts) if names else counts)
    print("; ".join(parts))


if __name__ == "__main__":
    main()
