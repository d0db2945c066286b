"""A short trial-and-error job for the demo: what a notebook user runs to try an idea."""
import os
import sys
import time

n = int(sys.argv[1]) if len(sys.argv) > 1 else 6
print(f"trial: on GPUs [{os.environ.get('CUDA_VISIBLE_DEVICES', '')}] in VC {os.environ.get('HIVED_VC')}",
      flush=True)
for i in range(1, n + 1):
    time.sleep(0.5)
    print(f"trial: iteration {i}/{n} accuracy {0.5 + 0.4 * i / n:.2f}", flush=True)
print("trial: done", flush=True)
