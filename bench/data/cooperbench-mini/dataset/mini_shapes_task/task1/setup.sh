#!/bin/bash
# Setup script for the mini suite's shapes task (bundled with Corral)

REPO_NAME="shapes"
BASE_COMMIT="83bb9842bf2f321d0f128cf0870c7e5369a42858"

if [ ! -d "$REPO_NAME" ]; then
    git clone https://github.com/corral-mini/shapes "$REPO_NAME"
fi
cd "$REPO_NAME"
git checkout "$BASE_COMMIT"
