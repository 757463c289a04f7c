#!/usr/bin/env bash
# Create the peer virtualenvs used by `python -m benchmarks.run`:
#   .bench-venvs/monarch  -- torch 2.13.0 (CPU wheel on local disk) + torchmonarch 0.7.0
#   .bench-venvs/ray      -- ray
# Both get numpy and psutil. Idempotent: a venv whose packages already import is skipped.
# Usage (from anywhere):  bash benchmarks/setup_peers.sh [monarch] [ray]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENVS="$ROOT/.bench-venvs"
PY="${PYTHON:-python3.11}"
MONARCH_PIN="${MONARCH_PIN:-0.7.0}"

log() { printf '[setup_peers] %s\n' "$*"; }

make_venv() {  # make_venv NAME -> creates $VENVS/NAME if missing
    local dir="$VENVS/$1"
    if [[ ! -x "$dir/bin/python" ]]; then
        log "creating venv $dir with $PY"
        "$PY" -m venv "$dir"
        "$dir/bin/python" -m pip install -q --upgrade pip
    fi
}

has_modules() {  # has_modules NAME mod1 mod2 ... -> 0 if all import in that venv
    local py="$VENVS/$1/bin/python"; shift
    [[ -x "$py" ]] || return 1
    local m
    for m in "$@"; do
        "$py" -c "import $m" >/dev/null 2>&1 || return 1
    done
}

setup_monarch() {
    if has_modules monarch torch monarch.actor numpy psutil; then
        log "monarch venv already set up; skipping"
    else
        make_venv monarch
        local pip="$VENVS/monarch/bin/python -m pip"
        log "installing torch==2.13.0 torchmonarch==$MONARCH_PIN numpy psutil"
        if ! $pip install "torch==2.13.0" "torchmonarch==$MONARCH_PIN" numpy psutil; then
            log "torchmonarch==$MONARCH_PIN did not resolve; trying unpinned torchmonarch"
            $pip install "torch==2.13.0" torchmonarch numpy psutil
        fi
    fi
    "$VENVS/monarch/bin/python" -m pip list 2>/dev/null \
        | grep -iE '^(torch|torchmonarch|numpy|psutil) ' | sed 's/^/[setup_peers] monarch: /'
}

setup_ray() {
    if has_modules ray ray numpy psutil; then
        log "ray venv already set up; skipping"
    else
        make_venv ray
        log "installing ray numpy psutil"
        "$VENVS/ray/bin/python" -m pip install ray numpy psutil
    fi
    "$VENVS/ray/bin/python" -m pip list 2>/dev/null \
        | grep -iE '^(ray|numpy|psutil) ' | sed 's/^/[setup_peers] ray: /'
}

main() {
    mkdir -p "$VENVS"
    local targets=("$@")
    [[ ${#targets[@]} -gt 0 ]] || targets=(monarch ray)
    local t
    for t in "${targets[@]}"; do
        case "$t" in
            monarch) setup_monarch ;;
            ray) setup_ray ;;
            *) log "unknown peer: $t"; exit 2 ;;
        esac
    done
}

main "$@"
