"""A small real training loop for `mlflow run --backend hived`.

Fits y = 3x + 1 by gradient descent, logs the loss once per step, and keeps a
checkpoint (step + weights) in $HIVED_CHECKPOINT_DIR after every step. When
hived restarts the job after a preemption it sets HIVED_RESUMED=1: the loop
continues from the checkpoint, so the metric's steps continue where they
stopped, under the same MLflow run.
"""
import argparse
import json
import os
import signal
import sys
import time

import mlflow

DATA = [(x / 10.0, 3.0 * x / 10.0 + 1.0) for x in range(-10, 11)]


def load_checkpoint(path):
    if os.environ.get("HIVED_RESUMED") == "1" and os.path.exists(path):
        with open(path) as fh:
            return json.load(fh)
    return {"step": 0, "w": 0.0, "b": 0.0}


def save_checkpoint(path, state):
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(state, fh)
    os.replace(tmp, path)  # atomic: a kill mid-write never leaves half a checkpoint


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=float, default=20)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--step-seconds", type=float, default=0.05)
    ap.add_argument("--fail-at", type=float, default=-1)
    args = ap.parse_args()

    ckpt_dir = os.environ.get("HIVED_CHECKPOINT_DIR") or "."
    os.makedirs(ckpt_dir, exist_ok=True)
    ckpt = os.path.join(ckpt_dir, "train_state.json")
    state = load_checkpoint(ckpt)
    # Preemption sends SIGTERM: leave at once without ending the MLflow run
    # (os._exit skips mlflow's atexit end_run), the last checkpoint is on disk.
    signal.signal(signal.SIGTERM, lambda *_: os._exit(143))

    mlflow.start_run()  # attaches to the run hived created (MLFLOW_RUN_ID)
    if state["step"] == 0:
        mlflow.log_param("resumed_from", 0)
    else:
        mlflow.set_tag("resumed_from_step", str(state["step"]))
    print(f"start at step {state['step']} (resumed={os.environ.get('HIVED_RESUMED')})", flush=True)
    w, b = state["w"], state["b"]
    for step in range(state["step"], int(args.steps)):
        if step == int(args.fail_at):
            print(f"failing on purpose at step {step}", file=sys.stderr, flush=True)
            sys.exit(3)
        gw = sum(2 * (w * x + b - y) * x for x, y in DATA) / len(DATA)
        gb = sum(2 * (w * x + b - y) for x, y in DATA) / len(DATA)
        w, b = w - args.lr * gw, b - args.lr * gb
        loss = sum((w * x + b - y) ** 2 for x, y in DATA) / len(DATA)
        mlflow.log_metric("loss", loss, step=step)
        save_checkpoint(ckpt, {"step": step + 1, "w": w, "b": b})
        time.sleep(args.step_seconds)
    mlflow.log_metric("final_w", w)
    print(f"done: w={w:.3f} b={b:.3f}", flush=True)
    mlflow.end_run()


if __name__ == "__main__":
    main()
