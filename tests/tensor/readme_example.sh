#!/usr/bin/env bash
# Runs libtensor's README example; it must succeed and report the shape error.
set -eu
out=$("${BUILD:-build}/bin/tensor_readme_example")
echo "$out"
grep -q 'expected error: tensor_linear_forward' <<<"$out"
