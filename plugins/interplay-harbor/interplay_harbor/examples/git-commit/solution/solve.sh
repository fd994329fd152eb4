#!/bin/bash
cd /app
git add -A
git commit -qm 'Add greeting'
