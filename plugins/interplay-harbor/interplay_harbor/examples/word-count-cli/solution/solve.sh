#!/bin/bash
cat > /app/wc.py <<'PY'
import sys


def main(argv):
    try:
        text = open(argv[1]).read()
    except FileNotFoundError:
        print('no such file', file=sys.stderr)
        return 2
    print(len(text.split()))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
PY
