"""AlloX (Le et al., "AlloX: Compute Allocation in Hybrid Clusters", EuroSys '20): placing jobs
over interchangeable devices (GPU, CPU, ...).

- ``matching``: the cost matrix Q = [P 2P ... nP] + [D ... D] and its
  min-cost bipartite matching (scipy's ``linear_sum_assignment``).
- ``fairness``: per-user progress and the alpha knob (§3.3).
- ``scheduler``: Algorithm 2 (the online AlloX scheduler) and AlloX+ (§4.4).
- ``baselines``: ES, DRFF, DRFS, DRFA, JSQ+, SJF+ (dispatchers) and SRPT.
- ``simulator``: a small event-driven simulator of machines of several kinds
  (one job per machine) used by the worked-example tests and the experiment.
"""
from .matching import Schedule, cost_matrix, solve, total_completion
from .model import Machine, SimJob

__all__ = ["Machine", "SimJob", "Schedule", "cost_matrix", "solve", "total_completion"]
