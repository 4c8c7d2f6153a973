#!/usr/bin/env bash
# Writes to stdout the diff these mutants were drawn from (`cargo mutants --in-diff`): the
# kernel lines changed between each file group's earlier mutation run and 96e6f75.
#   bash spec/mutants/changed-lines/diff.sh > changed.diff
#   cargo mutants -p hilock-kernel --in-diff changed.diff
set -euo pipefail
git diff 0766429 96e6f75 -- kernel/src/node.rs kernel/src/report.rs kernel/src/protocol.rs
git diff d412c4a 96e6f75 -- kernel/src/recovery.rs kernel/src/keep.rs
