#!/usr/bin/env bash
# Entry point for people and CI: `./run.sh demo` or `./run.sh test` (see README.md).
# Keeps one cargo target directory outside the clone so every checkout builds incrementally.
set -euo pipefail
cd "$(dirname "$0")"
export SPLIT_CACHE="${SPLIT_CACHE:-$HOME/.cache/splitinfer}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$SPLIT_CACHE/target}"
if ! command -v cargo >/dev/null; then
  echo "run.sh: cargo not found; install Rust from https://rustup.rs" >&2
  exit 1
fi
exec cargo xtask "$@"
