"""A stand-in for CooperBench's `scripts/check_gold_conflicts.py` with the two parts
`corral bench cooperbench census` reads from the real one (`filter_test_files` and
`check_one_pair`'s `merge_script`), written here for the suite: the real check runs the
command against a mirror of cooperbench/CooperBench (docs/cooperbench.md)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import git

SCRIPT = '''
def filter_test_files(patch_content):
    import re

    if not patch_content:
        return patch_content
    sections = re.split(r"(?m)^(?=diff --git)", patch_content)
    marks = ("/test_", "/tests/", "_test.py", "/test/", "tests.py")
    kept = [s for s in sections
            if not (s.startswith("diff --git") and any(m in s.split("\\n", 1)[0] for m in marks))]
    out = "".join(kept)
    return out if not out or out.endswith("\\n") else out + "\\n"


def check_one_pair(pair, timeout=300):
    f1, f2 = pair["f1"], pair["f2"]
    merge_script = f"""
cd /workspace/repo
git config user.email "census@example.invalid"
git config user.name "Census"
BASE_SHA=$(git rev-parse HEAD)
git checkout -b agent1 2>&1
if [ -s /patches/patch1.patch ]; then
    git apply --ignore-whitespace /patches/patch1.patch 2>&1 \\
        || git apply --3way /patches/patch1.patch 2>&1 || echo "PATCH1_APPLY_FAILED"
fi
git add -A
git commit -m "Feature {f1}" --allow-empty 2>&1
git checkout $BASE_SHA 2>&1
git checkout -b agent2 2>&1
if [ -s /patches/patch2.patch ]; then
    git apply --ignore-whitespace /patches/patch2.patch 2>&1 \\
        || git apply --3way /patches/patch2.patch 2>&1 || echo "PATCH2_APPLY_FAILED"
fi
git add -A
git commit -m "Feature {f2}" --allow-empty 2>&1
if git merge agent1 --no-commit --no-ff 2>&1; then
    echo "MERGE_RESULT={VERDICT}"
else
    echo "MERGE_RESULT=conflict"
fi
"""
    return merge_script
'''


def script_repo(path: Path, *, verdict: str = "clean") -> Path:
    """A git repository holding the stand-in at scripts/check_gold_conflicts.py on main;
    `verdict` is what it says of a merge that went through (`conflict`: a broken
    script, which the census must disagree with)."""
    (path / "scripts").mkdir(parents=True)
    (path / "scripts" / "check_gold_conflicts.py").write_text(
        SCRIPT.replace("{VERDICT}", verdict))
    git(path, "init", "-q", "-b", "main")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "the script")
    return path
