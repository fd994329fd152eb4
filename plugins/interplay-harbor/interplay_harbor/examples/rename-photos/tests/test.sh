#!/bin/bash
# Writes 1 to reward.txt when the check passes, else 0.
if [ "$(cd /app/photos && ls | sort | tr "\n" " ")" = "beach.jpg city.jpg notes.txt old.jpg " ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
