"""A best-effort "training" run for the demo: checkpoints and resumes.

Counts STEPS steps of STEP_SECONDS each, saving its step to
$HIVED_JOB_DIR/checkpoint.json. On SIGTERM (preemption) it saves and exits
143; started again it resumes from the checkpoint. Prints its progress.
Usage: python train.py [STEPS] [STEP_SECONDS]
"""
import json
import os
import signal
import sys
import time

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
step_s = float(sys.argv[2]) if len(sys.argv) > 2 else 0.5
ckpt = os.path.join(os.environ.get("HIVED_JOB_DIR", "."), "checkpoint.json")
step = json.load(open(ckpt))["step"] if os.path.exists(ckpt) else 0
gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "")
rank, world = os.environ.get("HIVED_RANK", "0"), os.environ.get("HIVED_WORLD_SIZE", "1")
print(f"train: rank {rank}/{world} on GPUs [{gpus}], "
      + (f"resuming from checkpoint at step {step}" if step else "starting from step 0"), flush=True)


def save(*_):
    with open(ckpt + ".tmp", "w") as f:
        json.dump({"step": step}, f)
    os.replace(ckpt + ".tmp", ckpt)


def preempted(*_):
    save()
    print(f"train: SIGTERM at step {step}: checkpoint saved, exiting", flush=True)
    sys.exit(143)


signal.signal(signal.SIGTERM, preempted)
while step < steps:
    time.sleep(step_s)
    step += 1
    save()
    if step % 4 == 0 or step == steps:
        print(f"train: step {step}/{steps} loss {2.0 / (1 + step):.3f}", flush=True)
print("train: done", flush=True)
