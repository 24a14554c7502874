"""What a rubric gets for a setting it leaves out (docs/language.md, "Budgets and settings"). The checker fills them
in and `RewardConfig` defaults to them, so a rubric without settings and a bare `RewardConfig()` score alike; they
live apart from the checker so that the reward code reads them without importing the parser."""

DEFAULT_BUDGET = 1.0  # r_c of each category
DEFAULT_LAMBDA = 0.8  # the weight of the breakthrough reward
DEFAULT_GAMMA = 0.95  # the discount of the return
DEFAULT_STEP_SCALE = "std"  # A_S divided by its step group's std; "none": centred only
STEP_SCALES = ("std", "none")
