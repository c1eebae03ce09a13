"""The CooperBench harness: reproduce pair pass rates (solo, coop, supervised), and
those of groups of N features (N agents; PR #75's fold), with agents working in Corral
scopes, graded by CooperBench 0.0.29's rules with stock git.

`corral bench cooperbench` runs the bundled mini suite; `--dataset DIR` a CooperBench
`dataset/` directory. The pipeline, one step a module:

    dataset      `_dataset`      tasks, features, the groups (pairs) to run
                 `_repos`        each task's base repository (from a local mirror)
    environment  `_environment`  the registry of languages (`_python_env`,
                                 `_toolchains`; a `Recipe`, `_recipe`), built once in
                                 the task's `env` scope (`_task_state`)
    units        `_units`        each (group, setting): fork, work, merge, grade
                                 (`_spec` the run's configuration, `_run` and `_ray`
                                 the executors, `_store` the results file)
    agents       `_agents`       the run's agent (an `agents.Agent`) and each one's
                                 `AgentContext`; `_oracle` (the oracle, an Agent);
                                 `_team` (a unit at work), `_team_rules` (the settings,
                                 budget, messaging, supervisor); `_agent_report` (what they
                                 came to, with the bench's own record)
    merge        `_merge`        Corral's merge of the agents' scopes, the LLM resolver
    grade        `_grade`        CooperBench's rules on a `Workbench` (`_workbench`):
                                 stock git (`_git_workbench`, the reference) or Corral
                                 scopes (`_scope_workbench`)
    report       `_records`      what a run writes; `_report` the pass rates;
                                 `_census` the plain-merge (fold) census; `_cli` the
                                 command
"""

from ._agent_report import AgentReport, TeamRecord
from ._agents import AgentChoice, AgentOptions, load_agent
from ._census import CensusRow, GoldFold, census_group, census_pair, compare_with_report
from ._dataset import (
    Feature,
    Group,
    Pair,
    Task,
    load_tasks,
    mini_suite,
    select_groups,
    select_pairs,
    test_command,
)
from ._environment import LANGUAGES, check_toolchain, recipe, task_test_command
from ._git_workbench import GitWorkbench
from ._grade import Grade, grade_merged, grade_solo
from ._host_env import Environment, prepare_env
from ._oracle import OracleAgent, oracle, oracle_steps
from ._patches import is_test_path, split_diff, strip_tests
from ._recipe import LanguageSupport, Recipe, Snapshot, Unsupported
from ._records import FORMAT_VERSION, FeatureResult, PairResult, Timings
from ._repos import base_repo
from ._run import plan, run
from ._scope_workbench import ScopeWorkbench
from ._spec import RunSpec
from ._store import ResultStore
from ._task_state import TaskState
from ._workbench import MergeRun, TestRun, Workbench, parse_results

__all__ = [
    "FORMAT_VERSION",
    "LANGUAGES",
    "AgentChoice",
    "AgentOptions",
    "AgentReport",
    "CensusRow",
    "Environment",
    "Feature",
    "FeatureResult",
    "GitWorkbench",
    "GoldFold",
    "Group",
    "Grade",
    "LanguageSupport",
    "MergeRun",
    "OracleAgent",
    "Pair",
    "PairResult",
    "Recipe",
    "ResultStore",
    "RunSpec",
    "ScopeWorkbench",
    "Snapshot",
    "Task",
    "TaskState",
    "TeamRecord",
    "TestRun",
    "Timings",
    "Unsupported",
    "Workbench",
    "base_repo",
    "census_group",
    "census_pair",
    "check_toolchain",
    "compare_with_report",
    "grade_merged",
    "grade_solo",
    "is_test_path",
    "load_agent",
    "load_tasks",
    "mini_suite",
    "oracle",
    "oracle_steps",
    "parse_results",
    "plan",
    "prepare_env",
    "recipe",
    "run",
    "select_groups",
    "select_pairs",
    "split_diff",
    "strip_tests",
    "test_command",
    "task_test_command",
]
