"""One job's attempts until it ends: where a job's status is decided, and what follows each ending.

    attempt        the planner's pick (preflighted once per cloud) is launched and watched (attempt.py);
                   a launch or boot that fails (NOT_READY) blocks what failed and the next pick is tried
    on_preempted   a preemption counts, blocks the lost pool, and relaunches from the checkpoint
                   (on-demand only after max_preemptions)
    on_relaunch    a re-attached attempt with nothing left to watch: relaunch, nothing counted
    on_restart     the job's own code failed: run again while max_restarts_on_errors allows
    finish         any other ending: the job's final status (states.Ending.to_status) and exit code

What each ending leads to is states.Ending's table; this module only carries it out.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from orchestrator.errors import CloudCredentialsError, JobFailedError, ProvisioningFailedError
from orchestrator.planning import blocks
from orchestrator.runs import sigterm
from orchestrator.runs.attempt import run_attempt
from orchestrator.runs.context import AttemptContext, GetProvider
from orchestrator.runs.failures import Failures, preflight
from orchestrator.runs.plans import (BudgetExhaustedError, fit_remaining_budget, make_plan, recovery_spec,
                                     remaining_fraction, require_choice)
from orchestrator.runs.watch import Outcome
from orchestrator.states import Ending, JobStatus, Recovery, exit_code_for

if TYPE_CHECKING:
    from infra.base import ProviderError
    from orchestrator.planning.planner import Candidate, Plan


@dataclass
class SubmitResult:
    job_id: str
    status: JobStatus
    exit_code: int = 0
    result: dict = field(default_factory=dict)


class RunLoop:
    """One job's run: what it blocked, tried and counted so far, and a method per ending."""

    def __init__(self, ctx: AttemptContext, get_provider: GetProvider, *, first_plan: Plan | None = None,
                 preemptions: int = 0):
        self.ctx, self.get_provider = ctx, get_provider
        self.spec, self.store, self.job_id = ctx.spec, ctx.store, ctx.job_id
        self.plan = first_plan  # what the next attempt launches from; None: plan again (what is blocked now)
        self.blocked: set[str] = unusable_at_submit(first_plan, self.store, self.job_id)  # block keys
        # (planning/blocks.py) of what failed, from the start the clouds that had no credentials at submit
        self.tried = Failures()
        self.preflighted: set[str] = set()  # clouds whose preflight ran (once each)
        self.skipped = ""  # a cloud the preflight ruled out: said once the run goes on elsewhere
        self.preemptions = preemptions
        self.restarts = 0

    def run(self, reattached: Outcome | None = None) -> SubmitResult:
        """Attempts until one ends the job. `reattached`: the outcome of a re-attached attempt, handled first."""
        outcome = reattached if reattached is not None else self.attempt()
        while self._recovered(outcome):
            outcome = self.attempt()
        return self.finish(outcome)

    def _recovered(self, outcome: Outcome) -> bool:
        """Carry out the recovery the ending asks for; False when the job ends with it."""
        recovery = outcome.kind.recovery
        if recovery is Recovery.PREEMPT:
            self.on_preempted(outcome)
        elif recovery is Recovery.RELAUNCH:
            self.on_relaunch(outcome)
        elif recovery is Recovery.RESTART and self.restarts < self.spec.max_restarts_on_errors:
            self.on_restart(outcome)
        else:
            return False
        return True

    # --- one attempt --------------------------------------------------------------------------------
    def attempt(self) -> Outcome:
        """Launch the planner's next pick until one comes up; the outcome of its run."""
        while True:
            cand = self._next_candidate()
            if not self._preflight(cand):
                continue
            outcome = run_attempt(self.ctx, cand, self.get_provider)
            if outcome.kind is not Ending.NOT_READY:
                return outcome
            assert outcome.error is not None  # NOT_READY always carries what stopped it
            self.on_provider_error(cand, outcome.error)

    def _next_candidate(self) -> Candidate:
        plan, self.plan = self.plan or self._replan(), None
        if plan.chosen is None and self.tried:
            err = CloudCredentialsError if self.tried.only_credentials else ProvisioningFailedError
            raise err(self.tried.summary("provisioning failed everywhere"))
        cand = require_choice(plan, self.spec)
        if self.skipped:  # said only when the run goes on elsewhere; else the final error says it once
            self.ctx.display.message(self.skipped)
            self.skipped = ""
        return cand

    def _replan(self) -> Plan:
        self.store.set_status(self.job_id, JobStatus.PLANNING)
        self.ctx.view.phase = "planning"
        self.ctx.display.update(self.ctx.view)
        on_demand = self.preemptions >= self.spec.max_preemptions
        plan = make_plan(recovery_spec(self.spec, on_demand, self.store, self.job_id), frozenset(self.blocked),
                         self.store)
        try:
            return fit_remaining_budget(plan, self.spec, self.store, self.job_id)
        except BudgetExhaustedError as e:
            if self.tried and remaining_fraction(self.store, self.job_id) >= 1.0:  # no work done: say why
                raise ProvisioningFailedError(
                    self.tried.summary(f"provisioning failed everywhere it fits ({e.message})")) from None
            raise

    def _preflight(self, cand: Candidate) -> bool:
        """Once per cloud, before anything is provisioned there: False rules the cloud out."""
        cloud = cand.offer.cloud
        if cloud in self.preflighted:
            return True
        self.preflighted.add(cloud)
        error = preflight(cloud, self.get_provider)
        if error is None:
            return True
        self.blocked.add(cloud)
        self.tried.add(cloud, error)
        self.skipped = f"{cloud} skipped: {error.message}"
        self.store.add_event(self.job_id, "preflight_failed", {"cloud": cloud, "error": error.message})
        return False

    # --- what follows an ending ---------------------------------------------------------------------
    def on_provider_error(self, cand: Candidate, error: ProviderError) -> None:
        """The launch or the boot failed: block what the error's scope says, try the next candidate."""
        self.blocked.add(blocks.for_error(cand.offer, error))
        self.tried.add(f"{cand.offer.label}{' spot' if cand.spot else ''}", error)
        self.ctx.display.message(f"{cand.offer.label}: {error.message} — trying the next candidate")
        self.store.add_event(self.job_id, "provision_failed", {"offer": cand.offer.key, "error": error.message})

    def on_preempted(self, outcome: Outcome) -> None:
        self.preemptions += 1
        self.store.set_preemptions(self.job_id, self.preemptions)
        self.ctx.display.message(f"preempted ({outcome.detail}); recovering from the last checkpoint")
        lost = self._lost_pool()
        if lost:  # block that spot pool, or the region of an on-demand loss
            self.blocked.add(lost)
        self.store.set_status(self.job_id, outcome.kind.to_status(), outcome.detail)

    def _lost_pool(self) -> str | None:
        """The pool of the attempt just lost (the store's: a re-attached one was not launched here)."""
        job = self.ctx.job()
        cluster = self.store.get_cluster(job.cluster_id) if job.cluster_id else None
        if cluster is None or not job.offer_key:
            return None
        return blocks.lost_pool(job.offer_key, cluster.spot)

    def on_relaunch(self, outcome: Outcome) -> None:
        self.store.set_status(self.job_id, outcome.kind.to_status(), outcome.detail)

    def on_restart(self, outcome: Outcome) -> None:
        """A user-code failure is not a preemption: retried only max_restarts_on_errors times."""
        self.restarts += 1
        self.store.add_event(self.job_id, "restart_on_error", {"restart": self.restarts, "detail": outcome.detail})
        self.ctx.display.message(f"the job failed; restart {self.restarts} of {self.spec.max_restarts_on_errors}")

    def finish(self, outcome: Outcome) -> SubmitResult:
        """The job's final status and what it reported; a failure raises JobFailedError (exit 1)."""
        job_id, view = self.job_id, self.ctx.view
        # a status it had ended with meanwhile (`dlrun cancel`) stands; the numbers are recorded all the same
        status = self.store.finish(job_id, outcome.kind.to_status(), outcome.detail,
                                   actual_seconds=time.time() - self.ctx.job().created_at,
                                   actual_run_seconds=outcome.run_seconds or None, result=outcome.result)
        view.phase = status.value.lower()
        self.ctx.display.update(view)  # the result line is the caller's to print, once (render/summary)
        if status == JobStatus.FAILED:
            if outcome.exit_code is None and outcome.detail:  # it never ran (watch.py): there is no log to see
                raise JobFailedError(f"job {job_id} failed on {view.backend}: {outcome.detail}")
            code = f" (exit code {outcome.exit_code})" if outcome.exit_code is not None else ""
            raise JobFailedError(f"job {job_id} failed on {view.backend}{code}; see `dlrun logs {job_id}`")
        return SubmitResult(job_id, status, exit_code_for(status, sigterm.received()), outcome.result)


def unusable_at_submit(first_plan: Plan | None, store, job_id: str) -> set[str]:
    """The clouds the submitted plan left out for want of credentials (re-plans leave them out too)."""
    if first_plan is not None:
        return set(first_plan.unusable)
    return {c for e in store.events(job_id) if e.kind == "plan" for c in (e.data or {}).get("unusable", [])}
