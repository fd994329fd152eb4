#!/bin/bash
# Each case is a metric; the reward is the share passed.
python3 /tests/check.py
