#!/bin/bash
# Setup script for the mini suite's kvstore task (bundled with Corral)

REPO_NAME="kvstore"
BASE_COMMIT="40d30eb6eb37cf97602dff26a1884984062c8323"

if [ ! -d "$REPO_NAME" ]; then
    git clone https://github.com/corral-mini/kvstore "$REPO_NAME"
fi
cd "$REPO_NAME"
git checkout "$BASE_COMMIT"
