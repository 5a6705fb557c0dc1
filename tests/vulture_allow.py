"""What the dead-code check (vulture, `make test`) must not call dead, each with why. Read by vulture only;
importing it does nothing but import the names."""
from practice.store import ProgressStore
from solvers import generators
from solvers.answers.choice import match_choice
from solvers.bank import Question
from solvers.engine import Solution
from solvers.formulas.calibration import Curve
from solvers.interview import asked_keys
from solvers.report import answer_value
from solvers.sheetmath import lcm_of
from solvers.topics.quantization.fp8_attention_quant_points import _ProbabilityPoint
from solvers.validate import validate
from tui.app import InfradrillApp
from tui.modes import BetweenStages

# Generators are named from the question files (`generate: pause_fabric`), never from code.
generators.lognormal_ints, generators.pause_fabric, generators.pause_frames, generators.plateau_decay
generators.plateau_incident, generators.plateau_reading, generators.spec_position, generators.spec_row
generators.greedy_gaps, generators.cost_ledger, generators.ledger_row, generators.gaussian_row_max
generators.moe_routing

# The store's and engine's API that the tests drive to set up and read state (a card due tomorrow, the
# schema a store opened at, a typed sheet graded at once, the keys a run of stages asked).
ProgressStore.schema_version
ProgressStore.save_card
Solution.grade_typed
Question.stage_of
asked_keys
answer_value
match_choice
validate

# Fields read by name or kept as data: a TypedDict key read by subscript; the question's seed-list
# provenance (CATALOGUE.md); RTN's error beside the calibrated one, which a test holds to its closed form.
_ProbabilityPoint.flushed_scaled
Question.catalogue
Curve.rtn_error

# The sheet-math vocabulary a question's author may use (sheetmath's table lists it; test_sheetmath holds each
# to its float twin), whether or not a question of the bank uses it today.
lcm_of

# A setting the settings screen offers by value (between_stages = verdict-only).
BetweenStages.VERDICT_ONLY

# App.notify keeps Textual's signature: screens pass markup=True, which is refused (every notice is plain).
InfradrillApp.notify
markup
