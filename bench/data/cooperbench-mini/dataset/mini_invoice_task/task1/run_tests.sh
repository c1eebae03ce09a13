#!/bin/bash

set -e

# Cleanup function
cleanup() {
    echo "Cleaning up repository..."
    if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
        git reset --hard HEAD 2>/dev/null || true
        git clean -fdx 2>/dev/null || true
        echo "Repository cleaned."
    fi
}

trap cleanup EXIT INT TERM

# Get input params
TEST_PATCH="$1"
FEATURE_PATCH="$2"

if [[ -z "$TEST_PATCH" ]]; then
    echo "Usage: docker run -v \$(pwd):/patches <image> <test_patch> [feature_patch]"
    exit 1
fi

cd /workspace/repo

# Ensure we start with a clean state
echo "Ensuring clean repository state..."
git reset --hard HEAD
git clean -fdx

# Apply feature patch if provided
if [[ -n "$FEATURE_PATCH" ]]; then
    echo "Applying feature patch: $FEATURE_PATCH"
    git apply --ignore-whitespace --ignore-space-change "/patches/$FEATURE_PATCH" \
        || git apply --3way "/patches/$FEATURE_PATCH"
fi

# Apply test patch
echo "Applying test patch: $TEST_PATCH"
git apply --ignore-whitespace --ignore-space-change "/patches/$TEST_PATCH" \
    || git apply --3way "/patches/$TEST_PATCH"

# Install dependencies (SYSTEM PYTHON)
echo "Installing dependencies..."
pip install pytest

# Run tests
echo "Running tests..."
python -m pytest tests/test_calc.py -v

echo "Test execution completed!"
