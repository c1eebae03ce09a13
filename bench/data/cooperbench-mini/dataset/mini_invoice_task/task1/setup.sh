#!/bin/bash
# Setup script for the mini suite's invoice task (bundled with Corral)

REPO_NAME="invoice"
BASE_COMMIT="fce42bcd973c86b33ddf60f402f61aa0362e51c4"

if [ ! -d "$REPO_NAME" ]; then
    git clone https://github.com/corral-mini/invoice "$REPO_NAME"
fi
cd "$REPO_NAME"
git checkout "$BASE_COMMIT"
