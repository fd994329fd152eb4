#!/bin/bash
python3 - <<'PY'
import json
c = json.load(open('/app/config.json'))
c.update(port=8080, debug=False)
json.dump(c, open('/app/config.json', 'w'), indent=2)
PY
