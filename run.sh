#!/usr/bin/env bash
# Entry point for people and CI: `./run.sh demo` or `./run.sh test` (see README.md); every
# other task too (`./run.sh help` lists the build tasks, `./run.sh eval --help` and so on the
# measuring ones).
# Keeps one cargo target directory outside the clone so every checkout builds incrementally.
set -euo pipefail
cd "$(dirname "$0")"
export SPLIT_CACHE="${SPLIT_CACHE:-$HOME/.cache/splitinfer}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$SPLIT_CACHE/target}"
# Cargo names a workspace crate's build by paths inside the workspace, so another checkout's
# build of the same crates counts as current here whenever this checkout's files are older
# than it (seen: a lab run in one clone served a module built from another clone's sources).
# When a different checkout built last, this one's tracked files are marked changed and its
# crates build again; the dependencies stay built.
mkdir -p "$CARGO_TARGET_DIR"
built_by="$CARGO_TARGET_DIR/.checkout"
if [ -f "$built_by" ] && [ "$(cat "$built_by")" != "$PWD" ] && git rev-parse --git-dir >/dev/null 2>&1; then
  echo "run.sh: $(cat "$built_by") built last in $CARGO_TARGET_DIR: rebuilding this checkout's crates" >&2
  git ls-files -z | xargs -0 touch -c --
fi
echo "$PWD" > "$built_by"
if ! command -v cargo >/dev/null; then
  echo "run.sh: cargo not found; install Rust from https://rustup.rs" >&2
  exit 1
fi
if [ "${1:-}" = test ]; then
  # The test command lints while it builds: the workspace's own crates (xtask included) are
  # compiled by clippy's driver with warnings denied, which is what `cargo clippy` runs, so the
  # dependencies are compiled once for the tests instead of once more in check mode for
  # clippy. xtask clears this for builds it must not lint (the browser modules, other
  # toolchains, `cargo install`).
  # Without rustup or clippy's driver, xtask runs `cargo clippy` on its own instead.
  rustup component add clippy rustfmt >/dev/null 2>&1 || true
  if driver="$(rustup which clippy-driver 2>/dev/null)"; then
    export RUSTC_WORKSPACE_WRAPPER="$driver"
    export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
  fi
fi
# Each task runs in the crate that has it: builds in xtask, measurements in split-studies
# (accuracy, calibration, privacy) and split-lab (performance), so that the demo compiles no
# tool it does not run.
case "${1:-}" in
  calibrate | eval | encrypted | fusion | light | stream-eval | invert | adversarial | llm-invert | llm-codec | train)
    exec cargo run --package split-studies -- "$@" ;;
  lab | profile | plan-sim | onnx | chat | llm-crowd | llm-placements)
    exec cargo run --package split-lab --bin split-lab -- "$@" ;;
  *)
    exec cargo xtask "$@" ;;
esac
