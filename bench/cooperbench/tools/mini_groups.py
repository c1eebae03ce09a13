"""The mini suite's groups of 3 and 4 features (the subset `groups`), which
`make_mini.py` writes as `dataset/subsets/groups.json` after checking each with git."""

from __future__ import annotations

GROUPS: dict[str, list[tuple[tuple[int, ...], int | None, str]]] = {
    "textkit": [
        ((1, 3, 4), 3, "3 and 4 extend one import block: agent 3's merge into the fold "
                       "conflicts"),
        ((1, 2, 3), 2, "1 and 2 rewrite one function"),
        ((1, 4, 5), None, "disjoint"),
        ((1, 3, 4, 5), 3, "the import block, with a new module beside it"),
        ((2, 3, 4, 5), 3, "the import block, with max_length and a new module"),
    ],
    "kvstore": [
        ((1, 3, 4), None, "a new module and two methods"),
        ((1, 2, 3), 2, "1 and 2 create the same new file"),
        ((1, 3, 4, 5), None, "every feature a different method or file"),
        ((1, 2, 3, 4), 2, "the same new file, and two methods"),
    ],
    "invoice": [
        ((3, 4, 5), 2, "3 and 4 append after total(), whose last line 5 rewrites"),
        ((1, 3, 4), 2, "1 rewrites total(), 3 and 4 append after it"),
        ((2, 3, 4, 5), 3, "3 merges with 2's tax rate; 4's constant beside the rate "
                          "conflicts"),
    ],
    "shapes": [
        ((1, 2, 5), 2, "three features extend one import list and __all__"),
        ((3, 4, 5), None, "disjoint"),
        ((1, 3, 4, 5), 4, "1 and 5 extend __all__; 3 and 4 disjoint"),
        ((2, 3, 4, 5), 4, "2 and 5 extend __all__; 3 and 4 disjoint"),
    ],
}
"""The groups of 3 and 4 features the subset `groups` lists (dataset/subsets/groups.json,
in CooperBench's subset format with a `groups` entry per task): each with the fold step
whose merge conflicts (`MergeRun.step`: 2 is agent 1 into agent 2, k >= 3 agent k into
the fold; None: all merge), which `make_mini.py` checks with git, and why."""
