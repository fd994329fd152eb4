#!/bin/bash
# Writes 1 to reward.txt when the check passes, else 0.
if grep -Eq '^port *= *8123$' /app/service.conf 2>/dev/null; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
