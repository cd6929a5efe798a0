#!/usr/bin/env bash
# Runs the GPT usage example: it trains a tiny model and must end with a low loss.
set -eu
"${BUILD:-build}/bin/gpt_example_train"
