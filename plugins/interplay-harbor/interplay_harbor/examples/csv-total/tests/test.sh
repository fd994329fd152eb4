#!/bin/bash
# Writes 1 to reward.txt when the check passes, else 0.
if [ "$(tr -d "[:space:]" < /app/total.txt 2>/dev/null)" = "100" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
