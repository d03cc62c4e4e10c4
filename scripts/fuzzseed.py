#!/usr/bin/env python3
"""Writes Go fuzz corpus files: fuzzseed.py [--string] DIR 'seed one' 'seed two' ...
(backslash escapes allowed). --string writes string(...) entries instead of []byte(...)."""
import json, os, sys
args = sys.argv[1:]
kind = "[]byte"
if args and args[0] == "--string":
    kind, args = "string", args[1:]
d = args[0]
os.makedirs(d, exist_ok=True)
for i, s in enumerate(args[1:], 1):
    s = s.encode().decode("unicode_escape")
    with open(os.path.join(d, f"seed{i}"), "w") as f:
        f.write("go test fuzz v1\n%s(%s)\n" % (kind, json.dumps(s)))
