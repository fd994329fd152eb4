#!/bin/bash
cd /tmp
printf 'one two\nthree  four five\n' > words.txt
# Writes 1 to reward.txt when the check passes, else 0.
if [ "$(python3 /app/wc.py words.txt)" = "5" ] && { python3 /app/wc.py missing.txt 2>err.txt; [ $? -eq 2 ]; } && grep -q "no such file" err.txt; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
