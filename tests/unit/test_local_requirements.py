"""A local job's requirements: Ray's pip env (a clone of dlrun's whole virtualenv) only for what is missing here."""
from importlib.metadata import version

from orchestrator.planning.spec import JobSpec
from orchestrator.runs.entrypoint import runtime_env
from orchestrator.planning.local_requirements import unmet_requirements


def test_what_this_python_has_is_met_and_the_rest_is_not():
    click = version("click")
    met = ["torch", f"click=={click}", f"click>={click}", "ray[default]", "nosuchpkg; python_version < '3'"]
    assert unmet_requirements(met) == []
    unmet = ["nosuchpkg-dlrun-test", "click<0.1", "torch[nosuchextra-that-brings]==0.0.1",
             "-r requirements.txt", "mypkg @ https://example.com/mypkg-1.0.tar.gz", "./local/path"]
    assert unmet_requirements(unmet) == unmet


def _renv(requirements):
    spec = JobSpec.model_validate({"name": "j", "run": "python train.py", "workdir": ".",
                                   "requirements": requirements})
    return runtime_env(spec, job_id="j", checkpoint="/tmp/ck", price_per_hour=0.0, local=True)


def test_a_local_job_whose_requirements_are_installed_gets_no_pip_env():
    assert "pip" not in _renv(["torch", "click"])  # Ray would clone the venv to install nothing


def test_a_local_job_missing_a_requirement_gets_all_of_them_in_rays_pip_env():
    assert _renv(["torch", "nosuchpkg-dlrun-test==1.0"])["pip"] == ["torch", "nosuchpkg-dlrun-test==1.0"]


def test_the_plan_counts_rays_pip_env_on_this_machine_only_when_something_is_missing():
    import yaml

    from infra.catalog import Offer
    from orchestrator.planning import planner
    from orchestrator.planning.local_requirements import PIP_ENV_PRIOR_SECONDS
    from orchestrator.planning.spec import parse_job
    from tests.support.planning import synthetic

    profile = synthetic(flops=3e9, membytes=2e8, ops=100, steps=100, state=1e7, act=1e7, local={"cpu": 0.01})
    here = Offer(cloud="local", region="local", instance_type="cpu", accelerator=None, accelerator_count=0,
                 gpu_memory_gb=0, vcpus=2, memory_gb=24, price_per_hour=0.0, spot_price_per_hour=None)

    def plan(requirements):
        spec = parse_job(yaml.safe_dump({"name": "t", "run": "python train.py", "workdir": ".",
                                         "requirements": requirements, "resources": {"clouds": ["local"]}}))
        return planner.plan(spec, [here], profile=profile)

    installed, missing = plan(["torch", "click"]), plan(["torch", "nosuchpkg-dlrun-test==1.0"])
    assert installed.chosen is not None and missing.chosen is not None
    assert missing.chosen.estimate.startup_seconds - installed.chosen.estimate.startup_seconds == PIP_ENV_PRIOR_SECONDS
    assert not any("pip env" in n for n in installed.notes)
    assert [n for n in missing.notes if "pip env" in n] == [
        "requirements not installed in dlrun's Python here: nosuchpkg-dlrun-test==1.0: a local run first makes "
        "Ray's pip env for them (a clone of dlrun's virtualenv, ~60 s, in the estimate); pip install them into "
        "dlrun's environment to skip it"]
