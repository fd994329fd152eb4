#!/bin/bash
cd /app
# Writes 1 to reward.txt when the check passes, else 0.
if [ "$(git log -1 --format=%s)" = "Add greeting" ] && [ -z "$(git status --porcelain)" ] && [ "$(git rev-list --count HEAD)" = "2" ] && git show --stat HEAD | grep -q greet.py; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
