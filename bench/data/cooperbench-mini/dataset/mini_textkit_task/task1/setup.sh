#!/bin/bash
# Setup script for the mini suite's textkit task (bundled with Corral)

REPO_NAME="textkit"
BASE_COMMIT="693f3371e2c3d2758ff3ccc0e564a1570498539b"

if [ ! -d "$REPO_NAME" ]; then
    git clone https://github.com/corral-mini/textkit "$REPO_NAME"
fi
cd "$REPO_NAME"
git checkout "$BASE_COMMIT"
