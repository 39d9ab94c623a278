"""Speed benchmark: python benchmarks/speed.py [--only 2a] [--timing fixed,roofline] [--repeat 3].

The suite lives in servesim.bench (also `servesim bench`); see docs/performance.md.
"""

import sys

from servesim.bench import main

if __name__ == "__main__":
    sys.exit(main())
