"""The CooperBench harness: reproduce pair pass rates (solo, coop, supervised) with
agents working in Corral scopes, graded by CooperBench 0.0.29's rules with stock git.

`corral bench cooperbench` runs the bundled mini suite; `--dataset DIR` a CooperBench
`dataset/` directory.
"""

from ._agents import (
    Agent,
    AgentOptions,
    AgentReport,
    Job,
    ModelAgent,
    OracleAgent,
    load_agent,
    oracle_steps,
)
from ._census import CensusRow, census_pair, compare_with_report
from ._dataset import Feature, Pair, Task, load_tasks, mini_suite, select_pairs, test_command
from ._env import Environment, Unsupported, base_repo, prepare_env
from ._evaluate import Grade, grade_merged, grade_solo
from ._lab import Lab, LabSteps, MergeRun, TestRun, parse_results
from ._patches import is_test_path, split_diff, strip_tests
from ._records import FORMAT_VERSION, FeatureResult, PairResult, Timings
from ._run import RunSpec, plan, run
from ._store import ResultStore

__all__ = [
    "FORMAT_VERSION",
    "Agent",
    "AgentOptions",
    "AgentReport",
    "CensusRow",
    "Environment",
    "Feature",
    "FeatureResult",
    "Grade",
    "Job",
    "Lab",
    "LabSteps",
    "MergeRun",
    "ModelAgent",
    "OracleAgent",
    "Pair",
    "PairResult",
    "ResultStore",
    "RunSpec",
    "Task",
    "TestRun",
    "Timings",
    "Unsupported",
    "base_repo",
    "census_pair",
    "compare_with_report",
    "grade_merged",
    "grade_solo",
    "is_test_path",
    "load_agent",
    "load_tasks",
    "mini_suite",
    "oracle_steps",
    "parse_results",
    "plan",
    "prepare_env",
    "run",
    "select_pairs",
    "split_diff",
    "strip_tests",
    "test_command",
]
