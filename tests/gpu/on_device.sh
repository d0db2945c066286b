#!/usr/bin/env bash
# Capture NVML on a real GPU and check hived on it: discovery, the health
# watcher, and jobs that initialise CUDA on exactly the GPU they were bound to.
# Writes everything under $OUT (docs/gpu.md says what to do with it).
#
#   bash tests/gpu/on_device.sh            # on a GPU machine (carry .whl)
#   bash tests/gpu/on_device.sh --dry-run  # here, without a GPU: FAKE NVML and CUDA
#
# Needs the wheel folder .whl/ (make gpu-wheels) where hived is not installed.
# Exits 3 at once when the machine has no NVIDIA GPU.
set -uo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$(mktemp -d /tmp/hived-gpu-out.XXXXXX)}
PY=${HIVED_GPU_PYTHON:-python3}
WATCH=${HIVED_GPU_WATCH:-60}
mkdir -p "$OUT"
if [ "${1:-}" = "--dry-run" ]; then
    export PYTHONPATH="$REPO/tests/gpu/fake_nvml${PYTHONPATH:+:$PYTHONPATH}" CUDA_PROBE_FAKE=1
    echo "on_device: DRY RUN with the FAKE NVML of tests/gpu/fake_nvml: nothing here is a capture of a GPU"
elif ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    echo "on_device: no NVIDIA GPU on this machine (nvidia-smi finds none): nothing to capture" >&2
    exit 3
fi
if ! "$PY" -c 'import hived.service.discovery' 2>/dev/null; then
    WHEELS=${HIVED_GPU_WHEELS:-$REPO/.whl}
    if ! ls "$WHEELS"/hived-*.whl >/dev/null 2>&1; then
        echo "on_device: hived is not importable and $WHEELS has no hived wheel (make gpu-wheels)" >&2
        exit 2
    fi
    SITE=$(mktemp -d /tmp/hived-gpu-site.XXXXXX)
    chmod 755 "$SITE"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$WHEELS"/*.whl \
        || { echo "on_device: installing $WHEELS failed" >&2; exit 2; }
    export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$SITE"
fi
echo "on_device: python $("$PY" -c 'import sys; print(sys.version.split()[0], sys.executable)'), out $OUT"
exec timeout 420 "$PY" "$REPO/tests/gpu/on_device.py" --out "$OUT" --watch "$WATCH"
