"""The input fuzzer's long run: ``tests/unit/test_fuzz_inputs.py`` with 5,000 cases (CI runs 200).

Every case is a mutated manifest for ``karpenter simulate`` or ``karpenter convert``, a mutated
NodePool, NodeClaim or NodeClass through the controller's decoding, or a broken provider catalog;
each must end in a result or a one-line error within 10 s. The cases are seeded, so a run is
repeatable; ``--cases`` changes how many. Prints pytest's summary and the wall time.

    .venv/bin/python benchmarks/fuzz.py              # 5,000 cases
    .venv/bin/python benchmarks/fuzz.py --cases 20000
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=5000, help="cases in all (default 5,000)")
    args = parser.parse_args()
    env = {**os.environ, "FUZZ_CASES": str(args.cases)}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    command += ["tests/unit/test_fuzz_inputs.py", "-x", "--no-header"]
    started = time.perf_counter()
    returncode = subprocess.call(command, cwd=ROOT, env=env)
    seconds = time.perf_counter() - started
    outcome = "passed" if returncode == 0 else f"FAILED (pytest exit {returncode})"
    print(f"{args.cases:,} cases: {outcome} in {seconds:.1f} s")
    return returncode


if __name__ == "__main__":
    sys.exit(main())
