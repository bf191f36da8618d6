"""(spec, offers, blocked) -> Plan: every candidate estimated and ranked, the cheapest feasible chosen.

A candidate is an offer in one market (on-demand or spot). It is *eligible* when the spec allows it
(clouds, regions, accelerator wish, GPU memory, spot policy, not blocked) and *feasible* when it is
eligible, the model fits its memory, and its estimate meets max_cost and the deadline. The choice is
the cheapest feasible candidate; ties go to the faster one, then to the offer key (deterministic).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from infra import capabilities, runs_here, selects
from infra.catalog import Offer, canonical_gpu, sold_markets
from infra.refresh.cache import LAUNCH_QUOTA_AGE_S
from infra.identity import owner_identity
from orchestrator.cost import usd_apart
from orchestrator.planning import blocks, image_check, local_requirements, plan_inputs, software
from orchestrator.estimate.estimator import Estimate, estimate, history_from_store
from orchestrator.planning.storage_plan import candidate_checkpoint, check_checkpoint, storage_notes

REFERENCE_COMPUTE_SHARE = 0.7  # of the reference time spent in matmul/conv, the rest on memory


@dataclass
class Candidate:
    offer: Offer
    spot: bool
    estimate: Estimate
    eligible: bool
    feasible: bool
    reason: str | None = None  # why excluded (None when feasible)
    chosen: bool = False
    software: dict | None = None  # image, driver, CUDA, torch wheel index (planning/software.py)
    checkpoint: str | None = None  # a cloud candidate's checkpoint base (bucket), planning/storage_plan.py
    wait: str | None = None  # a team cluster's GPUs (or CPUs) it needs are busy now: it would wait for them

    @property
    def backend(self) -> str:
        return self.offer.cloud

    def to_json(self) -> dict:
        from orchestrator.cli.render.summary import iso_time  # every --json time: ISO 8601 with its UTC offset

        o = self.offer
        return {"key": o.key, "cloud": o.cloud, "region": o.region, "instance_type": o.instance_type,
                "accelerator": o.accelerator, "accelerator_count": o.accelerator_count, "spot": self.spot,
                "eligible": self.eligible, "feasible": self.feasible, "chosen": self.chosen,
                "reason": self.reason, "checkpoint": self.checkpoint, "wait": self.wait,
                "price_date": o.spot_price_date if self.spot else o.price_date,
                "price_source": (o.extra.get("spot_source") or o.source) if self.spot else o.source,
                "price_fetched_at": iso_time(o.extra.get("spot_fetched_at" if self.spot else "fetched_at")),
                "estimate": self.estimate.to_json(), "software": self.software}


@dataclass
class Plan:
    candidates: list[Candidate]
    chosen: Candidate | None
    cheapest_feasible_cost_ignoring_budget: float | None
    fastest_hours_ignoring_deadline: float | None = None
    max_cost: float | None = None
    deadline_seconds: float | None = None
    profile: object = None
    notes: list[str] = field(default_factory=list)
    retired: list[str] = field(default_factory=list)  # a wished GPU is retired: why, and the nearest offer
    optimize: str = "cost"
    default_deadline: str | None = None  # set when the deadline is the config's default, not the job's
    zone_flags: dict[str, str] = field(default_factory=dict)  # offer key -> its flagged spot zone, in words
    quota_raise: list[str] = field(default_factory=list)  # quotas that keep offers out: which to raise, in words
    unusable: dict[str, str] = field(default_factory=dict)  # backend -> its missing credentials (planning/usable.py)
    credentials_needed: list[str] = field(default_factory=list)  # unusable clouds with a candidate that would fit

    @property
    def ranked(self) -> list[Candidate]:
        """Feasible first (best by the objective), then eligible-but-excluded, then the rest."""
        best = RANKS[self.optimize]
        return sorted(self.candidates, key=lambda c: (not c.feasible, not c.eligible, *best(c)))

    @property
    def runner_up(self) -> Candidate | None:
        """The best feasible candidate that is not the chosen one (another offer, or the other market)."""
        return next((c for c in self.ranked if c.feasible and not c.chosen), None)

    def nothing_fits_message(self) -> str:
        if self.cheapest_feasible_cost_ignoring_budget is not None and self.max_cost is not None:
            budget, cheapest = usd_apart(self.max_cost, self.cheapest_feasible_cost_ignoring_budget)
            return (f"nothing fits the budget of {budget}: the cheapest candidate that would work costs up to "
                    f"{cheapest}; raise --max-cost")
        if self.fastest_hours_ignoring_deadline is not None and self.deadline_seconds is not None:
            which = f"the default deadline ({self.default_deadline}, config.yaml)" if self.default_deadline \
                else "the deadline"
            return (f"nothing meets {which} of {self.deadline_seconds / 3600:.2f} h: the fastest candidate "
                    f"needs {self.fastest_hours_ignoring_deadline:.2f} h; extend --deadline")
        if self.retired:
            return "nothing fits: " + " ".join(self.retired)
        if self.quota_raise:
            from infra.refresh.quotas import raise_hint
            from infra.refresh.sources import SOURCE_CLOUDS

            clouds = [c for c in SOURCE_CLOUDS if any(q.startswith(c + " ") for q in self.quota_raise)]
            return ("nothing fits: this account's quotas rule out every candidate that would run it; raise "
                    + "; or ".join(self.quota_raise) + " — " + "; ".join(raise_hint(c) for c in clouds))
        return "nothing fits: no candidate can run this job (see 'why excluded'); relax resources or clouds"

    def to_json(self) -> dict:
        return {"chosen": self.chosen.to_json() if self.chosen else None,
                "cheapest_feasible_cost_ignoring_budget": self.cheapest_feasible_cost_ignoring_budget,
                "fastest_hours_ignoring_deadline": self.fastest_hours_ignoring_deadline,
                "max_cost": self.max_cost, "deadline_seconds": self.deadline_seconds, "notes": self.notes,
                "optimize": self.optimize, "default_deadline": self.default_deadline, "zone_flags": self.zone_flags,
                "quota_raise": self.quota_raise, "unusable": self.unusable,
                "profile": _profile_summary(self.profile),
                "candidates": [c.to_json() for c in self.ranked]}


def _profile_summary(p) -> dict | None:
    if p is None:
        return None
    return {"model": p.model, "model_family": p.model_family, "source": p.source, "params": p.params,
            "flops_per_step": p.flops_per_step, "total_steps": p.total_steps,
            "state_bytes": p.state_bytes, "activation_bytes": p.activation_bytes,
            "local_step_seconds": p.local_step_seconds, "note": p.note}


# --- the profile a spec is planned with ----------------------------------------------------------

def reference_profile(accelerator: str, hours: float, count: int = 1, note: str = ""):
    """A synthetic profile that takes `hours` on `count` × `accelerator` (or 'cpu'), for scaling."""
    from infra.catalog import gpu_spec
    from orchestrator.estimate.estimator import CPU_COMPUTE_EFFICIENCY, gpu_step_seconds
    from orchestrator.estimate.profile import OpCost, WorkloadProfile

    steps = 1000
    step = hours * 3600.0 / steps

    def profile(flops: float, moved: float) -> WorkloadProfile:
        ops = [OpCost("matmul", 0, flops * REFERENCE_COMPUTE_SHARE, 0.0),
               OpCost("elementwise", 0, 0.0, moved * (1 - REFERENCE_COMPUTE_SHARE))]
        return WorkloadProfile(model="(reference)", model_family="unknown", precision="fp32", batch_size=1,
                               steps_per_epoch=steps, epochs=1, params=0, weight_bytes=0, grad_bytes=0,
                               optimizer_bytes=0, activation_bytes=0, batch_input_bytes=0,
                               flops_per_step=flops * REFERENCE_COMPUTE_SHARE, ops=ops, source="reference",
                               note=note)

    if accelerator.lower() == "cpu":
        from orchestrator.planning.probe import cpu_probe

        probe = cpu_probe()
        return profile(step * probe["matmul_gflops"] * 1e9 * CPU_COMPUTE_EFFICIENCY, step * probe["copy_gbps"] * 1e9)
    gpu = gpu_spec(accelerator)
    assert gpu is not None  # spec.Reference admits only the catalog's GPUs (or cpu)
    # the GPU model is linear in a reference's work (no launches, no host ops) past a fixed sync: scale to fit
    fixed = gpu_step_seconds(profile(0.0, 0.0), gpu, count)
    unit = gpu_step_seconds(profile(1e12, 1e9), gpu, count) - fixed
    scale = max(step - fixed, 1e-6) / unit
    return profile(1e12 * scale, 1e9 * scale)


def profile_for(spec):
    if spec.workload is not None and spec.run:  # the user's model: from its workdir, in a child process
        from orchestrator.planning.isolated_profile import measure_in_workdir

        return measure_in_workdir(spec.workload, spec.workdir)
    if spec.workload is not None:
        from orchestrator.estimate.profile import measure

        return measure(spec.workload)
    if spec.reference is not None:
        r = spec.reference
        return reference_profile(r.accelerator, r.hours, r.count,
                                 note=f"scaled from the reference: {r.hours:g} h on {r.count}×{r.accelerator}; "
                                      "memory fit not checked (give a workload to check it)")
    from orchestrator.planning.job_probe import probe_job

    return probed_profile(probe_job(spec))


def probed_profile(probe):
    """A measured local run as a profile: exact on this CPU, scaled like a reference elsewhere."""
    from orchestrator.planning.job_probe import probe_note

    prof = reference_profile("cpu", probe.run_seconds / 3600.0,
                             note=f"measured by running the job here: {probe.run_seconds:.1f} s on this CPU "
                                  f"({probe_note(probe)}); other backends scaled from it, memory fit not checked")
    prof.local_step_seconds = {"cpu": probe.run_seconds / prof.total_steps}
    prof.local_threads = probe.threads
    prof.source = "probe"
    return prof


# --- eligibility -----------------------------------------------------------------------------------

SPOT_POOL_BLOCKED = "spot pool blocked after a preemption"


def spot_block_key(offer: Offer) -> str:
    """The key that rules out the spot market of an offer (blocks.py builds every block key)."""
    return blocks.spot_key(offer.key)


def markets(offer: Offer, spot_policy: str) -> list[bool]:
    """Which markets of an offer a spot policy allows; a backend without spot is always on-demand."""
    if not capabilities(offer.cloud).spot:
        return [False]
    has_spot = offer.spot_price_per_hour is not None
    allowed = {"never": [False], "always": [True] if has_spot else [],
               "auto": [False, True] if has_spot else [False]}[spot_policy]
    sold = sold_markets(offer)  # e.g. GCP's a3-highgpu-1g: sold as spot only (configs/catalog/gcp_markets.csv)
    return [m for m in allowed if sold is None or ("spot" if m else "on-demand") in sold]


def exclusion_reason(spec, offer: Offer, blocked: frozenset[str]) -> str | None:
    """Why the spec rules an offer out (before estimating), or None."""
    res = spec.resources
    if not selects(offer.cloud, res.clouds):
        return f"cloud {offer.cloud} not in resources.clouds"
    if blocks.excludes(offer, blocked):
        return "blocked after a failure"
    if res.regions and capabilities(offer.cloud).regional and offer.region not in res.regions:
        return f"region {offer.region} not in resources.regions"
    if res.num_nodes > 1 and not capabilities(offer.cloud).multi_node:
        return f"{offer.cloud} runs on one node"
    wishes = res.accelerator_wishes
    if offer.extra.get("cluster"):
        from infra.ray_cluster.offers import never_fits

        too_large = never_fits(offer, res.num_nodes)
        if too_large:
            return too_large
    if wishes:
        name = canonical_gpu(offer.accelerator) if offer.accelerator else None
        if not any(canonical_gpu(w.name) == name and w.count == offer.accelerator_count for w in wishes):
            want = ", ".join(f"{w.name}:{w.count}" for w in wishes)
            return f"not {want}"
    if offer.accelerator and capabilities(offer.cloud).remote and canonical_gpu(offer.accelerator) is None:
        return (f"GPU {offer.accelerator} has no datasheet figures in configs/catalog/gpus.csv (new to dlrun): "
                "it cannot be estimated yet")
    min_mem = res.min_gpu_memory_gb
    if min_mem is not None and (offer.accelerator is None or offer.gpu_memory_gb < min_mem):
        return f"GPU memory {offer.gpu_memory_gb:g} GB < {min_mem:g} GB"
    return software.exclusion_reason(spec, offer)


# --- the plan --------------------------------------------------------------------------------------

def plan(spec, offers: list[Offer], *, blocked: frozenset[str] = frozenset(), store=None, profile=None,
         history=None, settings=None, quotas=None, image=None, unusable: dict[str, str] | None = None) -> Plan:
    """quotas (infra.refresh.quotas.QuotaBook): a market this account cannot launch now is excluded,
    naming the quota to raise; None: quotas are not looked at. image: the job's checked `image:`
    (image_check.check_image), None without one. unusable: backend -> its missing credentials
    (planning/usable.py): its candidates are estimated and shown, never chosen."""
    unusable = unusable or {}
    needed: set[str] = set()
    profile = profile or profile_for(spec)
    if history is None and store is not None:
        history = history_from_store(store)
    blocked = frozenset(blocked)
    max_cost, deadline = spec.budget.max_cost, spec.budget.deadline_seconds
    notes = [profile.note] if profile.note else []
    default_deadline, optimize = None, spec.budget.optimize
    if deadline is None or optimize is None:
        from orchestrator.config import load_settings

        settings = settings or load_settings()
        if deadline is None:
            deadline, default_deadline = settings.default_deadline_seconds, settings.default_deadline
            notes.append(f"no deadline in the job: the default of {default_deadline} applies ({settings.source}; "
                         "set budget.deadline or --deadline to change it)")
        optimize = optimize or settings.optimize
    nodes = spec.resources.num_nodes
    owner = owner_identity()
    from orchestrator.planning.data_inputs import data_exclusion, local_bytes

    data_bytes = local_bytes(spec.data)
    unmet = [] if spec.image else local_requirements.unmet_requirements(list(spec.requirements))
    local_env = local_requirements.PIP_ENV_PRIOR_SECONDS if unmet else 0.0
    candidates: list[Candidate] = []
    for offer in offers:
        reason = exclusion_reason(spec, offer, blocked) or image_check.exclusion_reason(image, spec, offer)
        allowed = markets(offer, spec.resources.spot)
        if not allowed:
            reason = reason or "no spot price (spot: always)"
        for spot in allowed or [False]:
            est = estimate(profile, offer, spot=spot, num_nodes=nodes, history=history, data_bytes=data_bytes,
                           image_bytes=image_check.pull_bytes(image, offer), local_env_seconds=local_env)
            base, no_bucket = candidate_checkpoint(spec, offer, spot, owner)
            no_bucket = no_bucket or data_exclusion(spec, offer, base)
            market_reason = reason or (SPOT_POOL_BLOCKED if spot and blocks.spot_blocked(offer, blocked) else None) \
                or blocks.quota_blocked(offer, spot, blocked) \
                or (quotas.blocked(offer, spot, nodes) if quotas is not None else None)
            why = market_reason or (est.why_not if not est.fits else None) or no_bucket
            market_reason = market_reason or no_bucket
            if why is None and max_cost is not None and est.cost_high > max_cost:  # the range's high end
                why = "est. {} > budget {}".format(*usd_apart(est.cost_high, max_cost))  # the "up to" column
            if why is None and deadline is not None and est.total_seconds > deadline:
                why = f"est. {est.hours:.2f} h > deadline {deadline / 3600:.2f} h"
            if offer.cloud in unusable and reason is None:  # ruled out first by its missing credentials
                needed.update([offer.cloud] if why is None else [])
                why = market_reason = f"no {offer.cloud} credentials (`dlrun check`)"
            candidates.append(Candidate(offer, spot, est, eligible=market_reason is None, feasible=why is None,
                                        reason=why, software=software.software_json(spec, offer), checkpoint=base,
                                        wait=plan_inputs.cluster_wait(offer, nodes) if reason is None else None))
    feasible = [c for c in candidates if c.feasible]
    chosen = min(feasible, key=RANKS[optimize], default=None)
    if chosen:
        chosen.chosen = True
    workable = [c for c in candidates if c.eligible and c.estimate.fits]
    in_time = [c for c in workable if deadline is None or c.estimate.total_seconds <= deadline]
    retired = software.retired_wish_notes(spec, candidates)
    notes += retired + [n for n in [software.price_age_note(candidates), software.chosen_note(chosen)] if n]
    notes += storage_notes(chosen) + plan_inputs.cluster_notes(chosen)
    notes += image_check.image_notes(image, chosen)
    notes += left_out_note(unusable, chosen)
    if unmet and chosen is not None and runs_here(chosen.offer.cloud):
        notes.append(local_requirements.pip_env_note(unmet))
    raise_these = [] if quotas is None else plan_inputs.quota_notes(candidates, chosen, quotas, nodes, notes,
                                                                    RANKS[optimize])
    return Plan(candidates=candidates, chosen=chosen,
                cheapest_feasible_cost_ignoring_budget=min((c.estimate.cost_high for c in in_time), default=None),
                fastest_hours_ignoring_deadline=min((c.estimate.hours for c in workable), default=None),
                max_cost=max_cost, deadline_seconds=deadline, profile=profile, notes=notes, optimize=optimize,
                default_deadline=default_deadline,
                zone_flags=zone_flags(c for c in candidates if c.eligible and c.spot),
                retired=retired if chosen is None else [], quota_raise=raise_these, unusable=dict(unusable),
                credentials_needed=sorted(needed) if chosen is None else [])



def left_out_note(unusable: dict[str, str], chosen) -> list[str]:
    """The clouds planned only to say they lack credentials (when something else was chosen)."""
    if not unusable or chosen is None:
        return []
    return [f"left out, no credentials here: {', '.join(unusable)} (`--all` shows their offers; `dlrun check` "
            "says what fixes it)"]


def zone_flags(spot_candidates) -> dict[str, str]:
    """Spot offers whose region has a zone priced far below its others (not used for the estimate)."""
    from infra.spot_zones import outlier_note

    flags = {}
    for c in spot_candidates:
        ranking = c.offer.extra.get("spot_zones")
        if ranking is not None and ranking.outliers:
            flags[c.offer.key] = outlier_note(c.offer.label, ranking)
    return flags


def _by_cost(c: Candidate):
    return (c.estimate.cost, c.estimate.hours, c.offer.key, c.spot)


def _by_time(c: Candidate):
    return (c.estimate.hours, c.estimate.cost, c.offer.key, c.spot)


RANKS = {"cost": _by_cost, "time": _by_time}


def restrict(spec, backend: str | None):
    """--backend NAME narrows the spec's clouds to that one backend."""
    if not backend:
        return spec
    res = spec.resources.model_copy(update={"clouds": [backend]})
    return spec.model_copy(update={"resources": res})


def plan_job(spec, *, blocked: frozenset[str] = frozenset(), store=None, offers: list[Offer] | None = None,
             quota_max_age_s: float | None = LAUNCH_QUOTA_AGE_S, quotas=None, progress=None,
             unusable: dict[str, str] | None = None) -> Plan:
    """The plan over every backend the spec names (this machine and the catalog's cloud offers); those in
    `unusable` (no credentials: planning/usable.py) are shown and never chosen, and nothing is read for them.

    The account's quotas in the offers' regions are read again where older than quota_max_age_s (default
    LAUNCH_QUOTA_AGE_S: this plan may be launched; `dlrun plan` passes None, the quotas' lifetime)."""
    check_checkpoint(spec)
    offers_given = offers
    cluster_problems: list[str] = []
    if offers is None:
        offers = plan_inputs.offers_with_clusters(spec, cluster_problems)
    else:
        offers = [o for o in offers if selects(o.cloud, spec.resources.clouds)]
    image = image_check.check_image(spec, offers)  # the registry is asked before any cloud is
    refresh_notes: list[str] = []
    if offers_given is None:
        refresh_notes = plan_inputs.refresh_stale([c for c in spec.resources.clouds if c not in (unusable or {})],
                                                  progress or plan_inputs.stderr_line)
        if refresh_notes is not None and refresh_notes[:1] == ["refreshed"]:
            offers = plan_inputs.offers_with_clusters(spec, [])
            refresh_notes = refresh_notes[1:]
    if quotas is None:
        quotas = plan_inputs.quotas_for(spec, offers, quota_max_age_s, progress or plan_inputs.stderr_line)
    result = plan(spec, offers, blocked=blocked, store=store, quotas=quotas, image=image, unusable=unusable)
    result.notes += (refresh_notes or []) + cluster_problems
    note = plan_inputs.price_source_note(result)
    if note:
        result.notes.append(note)
    return result
