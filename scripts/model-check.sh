#!/usr/bin/env bash
# Checks the protocol's model (crates/cutover-model, docs/model.md) in a
# release build (--ci: the optimised dev build): every interleaving to a bounded depth, with cutover-core's
# own decisions. Prints states explored, unique states, depth and time, and
# each counterexample as one line per action.
#
#   scripts/model-check.sh                      the real rules, CI configuration
#   scripts/model-check.sh --mutant NAME        one rule broken on purpose
#   scripts/model-check.sh --mutant list        the mutants
#   scripts/model-check.sh --depth N --msgs N --crashes N --strategy mirror ...
#   scripts/model-check.sh --ci                 the real rules and the mutants, on
#                                               2.15.1's rules (the tests' server):
#                                               drain mode with source (every mutant;
#                                               also without a guard) and mirror, fence
#                                               mode with source and with mirror
#                                               (2 threads)
#
# Exit 0 when the expected outcome happens (no counterexample for the real
# rules, one for a mutant), non-zero otherwise.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
target="${CARGO_TARGET_DIR:-$root/target}"
if [ "${1:-}" != "--ci" ]; then
  cargo build -p cutover-model --release --locked -q
  exec "$target/release/cutover-model" "$@"
fi
# --ci: the dev build, which the workspace's dev profile optimises for the
# model (Cargo.toml) and which the test build after it in .ci/run reuses;
# a release build of its dependencies would cost CI more than it saves.
cargo build -p cutover-model --locked -q
bin="$target/debug/cutover-model"
started=$(date +%s%N)
failed=0
# Strategy source, drain mode: the real rules (also without a guard and with
# journal faults) and every mutant that applies. Mirror and fence mode: the
# real rules and the mutants of what they do their own way (the promotion
# and its window; the fence's F and its acknowledgement); the unit tests
# check every mutant in each mode at a smaller bound. Kept under three
# minutes on two cores that another build is also using.
for run in "source drain" "mirror drain" "source fence" "mirror fence 2.15.1"; do
  set -- $run
  case "$1 $2" in
    "source drain") variants="none no-guard $("$bin" --mode drain --mutant list | awk '{print $1}')" ;;
    "mirror drain") variants="none no-dedup-window commit-before-caught-up" ;;
    # rollback-unheld (finding 3) is checked by the unit tests, which CI runs.
    "source fence") variants="none ack-floor resume-before-fence-ack" ;;
    # Finding 2's shape (docs/model.md): a rollback that resets the old
    # durable, so a server with consumer reset; the mutant only (the unit
    # test a_rollback_in_fence_mode_... checks the real rules there).
    "mirror fence") variants="fence-at-handling" ;;
  esac
  for v in $variants; do
    args=(--strategy "$1" --mode "$2" --threads 2)
    [ -n "${3:-}" ] && args+=(--server "$3")
    case "$v" in
      none) ;;
      # The real rules with no guard beside the runner, and the journal's
      # bucket stopping at the checkpoint's or the intent's write.
      no-guard) args+=(--no-guard --journal-fault settled --journal-fault creating) ;;
      # A mutant needs one counterexample: the search stops at the first.
      *) args+=(--mutant "$v" --first) ;;
    esac
    if ! "$bin" --brief "${args[@]}"; then
      failed=1
      "$bin" "${args[@]}" || true   # again, with the traces
    fi
  done
done
ms=$((($(date +%s%N) - started) / 1000000))
echo "model check --ci: $((ms / 1000)).$(printf %03d $((ms % 1000))) s in all (build excluded)"
[ "$failed" = 0 ] || { echo "model check --ci FAILED" >&2; exit 1; }
