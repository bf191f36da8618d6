"""The plans a run launches from: the first one (plan_for_submit: nothing fits -> NothingFitsError, exit 3),
and each re-plan after a failure, fitted to what is left of the budget for what is left of the work."""
from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.cost import usd, usd_apart
from orchestrator.errors import NothingFitsError
from orchestrator.planning.spec import JobSpec
from orchestrator.runs.context import job_record
from orchestrator.state.db import Store

if TYPE_CHECKING:
    from orchestrator.estimate.estimator import Estimate
    from orchestrator.planning.planner import Candidate, Plan


class BudgetExhaustedError(NothingFitsError):
    """Recovery would need more than what is left of max_cost."""


def make_plan(spec: JobSpec, blocked: frozenset[str] = frozenset(), store: Store | None = None) -> Plan:
    from orchestrator.planning.planner import plan_job

    return plan_job(spec, blocked=blocked, store=store)


def plan_for_submit(spec: JobSpec, backend: str | None = None, *, store: Store | None = None) -> Plan:
    """The plan `dlrun submit` launches (on `backend` only, when given), over the backends usable from here
    (planning/usable.py: CloudCredentialsError when only clouds without credentials could run the job);
    NothingFitsError when nothing fits."""
    from orchestrator.planning.planner import plan_job, restrict
    from orchestrator.planning.usable import require_usable

    spec = restrict(spec, backend)
    plan = plan_job(spec, store=store, unusable=require_usable(spec))
    require_choice(plan, spec)
    return plan


def require_choice(plan: Plan, spec: JobSpec) -> Candidate:
    """The plan's chosen candidate; CloudCredentialsError when only clouds without credentials would run it,
    NothingFitsError (with the plan, for its table) when nothing would."""
    if plan.chosen is not None:
        return plan.chosen
    if plan.credentials_needed:
        from orchestrator.planning.usable import credentials_error

        raise credentials_error(spec.name, plan.unusable, plan.credentials_needed)
    if plan.quota_raise:  # the account's quotas, not the budget: say which to raise
        raise NothingFitsError(f"{spec.name}: {plan.nothing_fits_message()}", plan=plan)
    cheapest = plan.cheapest_feasible_cost_ignoring_budget
    hint = f"; the cheapest that would work costs {usd(cheapest)} (raise --max-cost)" if cheapest else \
        "; relax the deadline, accelerators or clouds"
    raise NothingFitsError(f"{spec.name}: no backend fits the budget/deadline{hint}", plan=plan)


def recovery_spec(spec: JobSpec, on_demand: bool, store: Store, job_id: str) -> JobSpec:
    """After a first attempt: the budget is checked against the remaining work (fit_remaining_budget),
    and after max_preemptions only on-demand offers are considered."""
    updates = {}
    if on_demand:
        updates["resources"] = spec.resources.model_copy(update={"spot": "never"})
    if job_record(store, job_id).attempts:
        updates["budget"] = spec.budget.model_copy(update={"max_cost": None})
    return spec.model_copy(update=updates) if updates else spec


def remaining_fraction(store: Store, job_id: str) -> float:
    """The share of the epochs still to train, from the last epoch the job reported."""
    m = job_record(store, job_id).metrics
    if m.get("epoch") and m.get("epochs"):
        return max(0.0, 1.0 - float(m["epoch"]) / float(m["epochs"]))
    return 1.0


def remaining_cost(estimate: Estimate, fraction: float) -> float:
    """Start-up again, plus the remaining share of the run (and of its expected preemption overhead)."""
    seconds = estimate.startup_seconds + (estimate.run_seconds + estimate.preemption_seconds) * fraction
    return seconds * estimate.price_per_hour / 3600.0


def fit_remaining_budget(plan: Plan, spec: JobSpec, store: Store, job_id: str) -> Plan:
    """Recovery never launches when the remaining budget cannot cover the remaining work."""
    job = job_record(store, job_id)
    if not job.attempts or not spec.budget.max_cost:
        return plan
    left = spec.budget.max_cost - job.actual_cost
    fraction = remaining_fraction(store, job_id)
    ranked = [c for c in plan.ranked if c.feasible]
    for c in ranked:
        c.chosen = False
    fits = [c for c in ranked if remaining_cost(c.estimate, fraction) <= left]
    plan.chosen = min(fits, key=lambda c: (remaining_cost(c.estimate, fraction), c.estimate.hours), default=None)
    if plan.chosen is not None:
        plan.chosen.chosen = True
    elif ranked:
        need = min(remaining_cost(c.estimate, fraction) for c in ranked)
        left_text, need_text = usd_apart(left, need)
        raise BudgetExhaustedError(f"{spec.name}: {left_text} of the budget is left, the remaining "
                                   f"{fraction:.0%} of the work needs {need_text}; not relaunching")
    return plan
