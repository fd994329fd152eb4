#!/bin/bash
cd /app
# Writes 1 to reward.txt when the check passes, else 0.
if python3 /tests/test_calc.py; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
