#!/bin/bash
python3 - <<'PY'
import json
try:
    c = json.load(open('/app/config.json'))
except Exception:
    c = {}
port = int(c.get('port') == 8080)
debug = int(c.get('debug') is False)
kept = int(c.get('name') == 'shop' and c.get('workers') == 4)
json.dump({'reward': float(port and debug and kept), 'port': port, 'debug': debug, 'kept': kept},
          open('/logs/verifier/reward.json', 'w'))
PY
