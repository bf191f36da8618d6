"""What one training step costs, anywhere: the workload, its recorded ops by typed kernel class, GPU time per class
from calibration data, the host side, history, and the Estimate. Apart from the planner (orchestrator/planning/),
which only asks this package for an Estimate per offer."""
