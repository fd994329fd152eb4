import json
import sys

sys.path.insert(0, "/app")
cases = {"hello": ("Hello, World!", "hello-world"),
         "spaces": ("  many   spaces  ", "many-spaces"),
         "digits": ("Version 2.0 is out", "version-2-0-is-out"),
         "edges": ("--already-slugged--", "already-slugged")}
scores = {}
try:
    from textutil import slugify
except Exception:
    slugify = None
for name, (given, wanted) in cases.items():
    try:
        scores[name] = int(slugify(given) == wanted)
    except Exception:
        scores[name] = 0
scores["reward"] = sum(scores.values()) / len(cases)
print(scores)
with open("/logs/verifier/reward.json", "w") as f:
    json.dump(scores, f)
