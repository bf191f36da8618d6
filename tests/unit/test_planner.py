"""The planner: its choice is the brute-force cheapest feasible candidate; spec rules and blocking."""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.planning import planner
from infra.catalog import canonical_gpu, sold_markets
from infra.software import retirement
from orchestrator.estimate.estimator import estimate
from orchestrator.planning.spec import parse_job
from infra.storage import node_scheme
from tests.support.planning import CATALOG, LOCAL_CPU, PROFILE

GPUS = sorted({o.accelerator for o in CATALOG if o.accelerator})


def spec(**fields):
    import yaml

    return parse_job(yaml.safe_dump({"name": "t", "job": "cnn", **fields}))


def brute_force(sp, offers, blocked=frozenset(), local=()):
    """Every (offer, market) the spec allows, estimated; the minimum (cost, hours) that meets all limits."""
    res, best = sp.resources, None
    for o in [*local, *offers]:
        if o.cloud not in res.clouds or o.cloud in blocked or f"{o.cloud}/{o.region}" in blocked or o.key in blocked:
            continue
        if o.cloud == "local" and res.num_nodes > 1:
            continue
        if res.accelerators and not any(canonical_gpu(w.name) == (o.accelerator and canonical_gpu(o.accelerator))
                                        and w.count == o.accelerator_count for w in res.accelerator_wishes):
            continue
        if res.min_gpu_memory_gb and (o.accelerator is None or o.gpu_memory_gb < res.min_gpu_memory_gb):
            continue
        if o.cloud != "local" and retirement(o.cloud, o.instance_type, o.accelerator):
            continue  # retired: K80 everywhere, AWS p2/p3 (every other catalog GPU has a torch 2.13 wheel)
        markets = [False] if o.cloud == "local" else \
            [m for m in (False, True) if (res.spot != "always" or m) and (res.spot != "never" or not m)
             and (not m or o.spot_price_per_hour is not None)
             and (not m or node_scheme(o.cloud))  # spot needs a checkpoint bucket its nodes can reach
             and (sold_markets(o) is None or ("spot" if m else "on-demand") in sold_markets(o))]
        for spot in markets:
            e = estimate(PROFILE, o, spot=spot, num_nodes=res.num_nodes)
            if not e.fits or (sp.budget.max_cost and e.cost_high > sp.budget.max_cost):  # the range's high end
                continue
            if sp.budget.deadline_seconds and e.hours * 3600 > sp.budget.deadline_seconds:
                continue
            if best is None or (e.cost, e.hours) < best[0]:
                best = ((e.cost, e.hours), o, spot)
    return best


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    offer_idx=st.lists(st.integers(0, len(CATALOG) - 1), min_size=0, max_size=40, unique=True),
    with_local=st.booleans(),
    clouds=st.lists(st.sampled_from(["local", "aws", "gcp"]), min_size=1, max_size=3, unique=True),
    spot=st.sampled_from(["auto", "always", "never"]),
    wish=st.one_of(st.none(), st.tuples(st.sampled_from(GPUS), st.sampled_from([1, 2, 4, 8]))),
    min_mem=st.one_of(st.none(), st.sampled_from([12, 16, 24, 40])),
    max_cost=st.one_of(st.none(), st.floats(0.05, 60)),
    deadline_h=st.one_of(st.none(), st.floats(0.2, 12)),
    nodes=st.sampled_from([1, 1, 2]),
    blocked=st.sets(st.sampled_from(["aws", "gcp", "aws/us-east-1", "gcp/us-central1",
                                     "aws/us-west-2/g4dn.xlarge", "local"]), max_size=2),
)
def test_choice_equals_brute_force_minimum(offer_idx, with_local, clouds, spot, wish, min_mem, max_cost,
                                           deadline_h, nodes, blocked):
    offers = [CATALOG[i] for i in offer_idx]
    resources = {"clouds": clouds, "spot": spot, "num_nodes": nodes}
    if wish:
        resources["accelerators"] = f"{wish[0]}:{wish[1]}"
    if min_mem:
        resources["gpu_memory_gb"] = f"{min_mem}+"
    budget = {k: v for k, v in {"max_cost": max_cost, "deadline": deadline_h and deadline_h * 3600}.items() if v}
    sp = spec(resources=resources, budget=budget)
    local = [LOCAL_CPU] if with_local else []
    plan = planner.plan(sp, [*local, *offers], blocked=frozenset(blocked), profile=PROFILE)
    expected = brute_force(sp, offers, frozenset(blocked), local)
    if expected is None:
        assert plan.chosen is None
    else:
        assert plan.chosen is not None
        assert (plan.chosen.estimate.cost, plan.chosen.estimate.hours) == expected[0]
    assert sum(c.chosen for c in plan.candidates) == (expected is not None)
    for c in plan.candidates:  # every excluded candidate says why
        assert c.feasible == (c.reason is None)


def test_blocking_an_offer_a_region_or_a_cloud():
    sp = spec(resources={"accelerators": "T4:1", "clouds": ["aws", "gcp"]})
    first = planner.plan(sp, CATALOG, profile=PROFILE).chosen
    for block in (first.offer.key, f"{first.offer.cloud}/{first.offer.region}", first.offer.cloud):
        again = planner.plan(sp, CATALOG, blocked=frozenset({block}), profile=PROFILE).chosen
        assert again is not None and again.offer.key != first.offer.key
        assert block not in (again.offer.key, f"{again.offer.cloud}/{again.offer.region}", again.offer.cloud)
        assert any(c.reason == "blocked after a failure" for c in
                   planner.plan(sp, CATALOG, blocked=frozenset({block}), profile=PROFILE).candidates)


def test_a_preempted_spot_pool_blocks_only_the_spot_market_of_that_offer():
    sp = spec(resources={"accelerators": "T4:1", "clouds": ["aws"], "spot": "auto"})
    first = planner.plan(sp, CATALOG, profile=PROFILE).chosen
    assert first.spot
    again = planner.plan(sp, CATALOG, blocked=frozenset({planner.spot_block_key(first.offer)}), profile=PROFILE)
    assert (again.chosen.offer.key, again.chosen.spot) != (first.offer.key, True)
    same_offer = {c.spot: c for c in again.candidates if c.offer.key == first.offer.key}
    assert same_offer[True].reason == planner.SPOT_POOL_BLOCKED and not same_offer[True].eligible
    assert same_offer[False].eligible  # its on-demand market is still there


def test_accelerator_count_and_spot_policy_are_respected():
    plan = planner.plan(spec(resources={"accelerators": "V100:4", "spot": "never"}), CATALOG, profile=PROFILE)
    assert plan.chosen.offer.accelerator == "V100" and plan.chosen.offer.accelerator_count == 4
    assert not any(c.spot for c in plan.candidates)
    always = planner.plan(spec(resources={"spot": "always", "clouds": ["aws"]}), CATALOG, profile=PROFILE)
    assert always.chosen.spot and all(c.spot for c in always.candidates if c.eligible)


def test_budget_below_the_cheapest_reports_the_cheapest_that_would_work():
    plan = planner.plan(spec(budget={"max_cost": 0.01}, resources={"clouds": ["aws", "gcp"]}), CATALOG,
                        profile=PROFILE)
    assert plan.chosen is None
    workable = [c.estimate.cost_high for c in plan.candidates if c.eligible and c.estimate.fits]  # the high end
    assert plan.cheapest_feasible_cost_ignoring_budget == min(workable) > 0.01
    assert f"${min(workable):.2f}" in plan.nothing_fits_message()


def test_reference_is_scaled_to_other_gpus():
    plan = planner.plan(spec(reference={"accelerator": "V100", "hours": 3}), CATALOG)
    by_gpu = {(c.offer.accelerator, c.offer.accelerator_count): c.estimate.run_seconds
              for c in plan.candidates if not c.spot}
    assert by_gpu[("V100", 1)] == pytest.approx(3 * 3600, rel=0.01)
    assert by_gpu[("H100", 1)] < by_gpu[("A100", 1)] < by_gpu[("V100", 1)] < by_gpu[("K80", 1)]
    assert any("reference" in n for n in plan.notes)


def test_plan_json_lists_every_candidate():
    plan = planner.plan(spec(), [LOCAL_CPU, *CATALOG], profile=PROFILE)
    data = plan.to_json()
    assert len(data["candidates"]) == len(plan.candidates)
    assert data["chosen"]["key"] == plan.chosen.offer.key
