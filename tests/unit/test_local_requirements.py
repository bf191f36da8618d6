"""A local job's requirements: Ray's pip env (a clone of dlrun's whole virtualenv) only for what is missing here."""
from importlib.metadata import version

from orchestrator.planning.spec import JobSpec
from orchestrator.runs.entrypoint import runtime_env
from orchestrator.runs.local_requirements import unmet_requirements


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
