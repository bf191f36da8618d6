"""What `dlrun plan` chooses and shows: the default deadline (config.yaml), --optimize cost|time, spot priced
per zone with outliers flagged, a table that fits 100 columns, the choice line and the plot."""
import json

import pytest
import yaml
from click.testing import CliRunner

from orchestrator.cli import plan as cli_plan
from orchestrator.errors import DlrunError

# ResNet-50 on ImageNet, 90 epochs, no deadline. 85.7 h on one V100 (fp32): torchvision ResNet-50 at
# batch 128 on a V100-SXM2 takes 342.37 ms per iteration (sandeepkumar-skb/pytorch_experiments,
# torchvision_exp/README.md); 90 × 1,281,167 images / 128 = 900,820 iterations.
RESNET50_IMAGENET = {"name": "resnet50-imagenet", "job": "resnet", "reference": {"accelerator": "V100", "hours": 85.7}}
TINY = {"model": "tests.support.models:TinyCNN", "input_shape": [1, 8, 8], "batch_size": 32,
        "dataset_size": 320, "epochs": 2}


@pytest.fixture(autouse=True)
def cpu_only_machine(monkeypatch):
    monkeypatch.setenv("DLRUN_LOCAL_GPUS", "none")


def job_file(tmp_path, job: dict) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return str(path)


def invoke(command, args):
    result = CliRunner().invoke(command, args)
    code = result.exception.exit_code if isinstance(result.exception, DlrunError) else result.exit_code
    return code, result


def plan_json(path, *args):
    """The plan as JSON, over every cloud (this machine has no cloud credentials: `--any-cloud`)."""
    code, result = invoke(cli_plan.plan_command, [path, "--json", "--any-cloud", *args])
    assert code == 0, result.output
    return json.loads(result.stdout)


def test_resnet50_imagenet_without_deadline_ends_within_the_default_and_says_which(tmp_path):
    path = job_file(tmp_path, RESNET50_IMAGENET)
    data = plan_json(path)
    chosen = data["chosen"]
    assert chosen["cloud"] != "local" and chosen["estimate"]["hours"] <= 72
    assert data["default_deadline"] == "72h" and data["deadline_seconds"] == 72 * 3600
    local = next(c for c in data["candidates"] if c["cloud"] == "local")
    assert local["estimate"]["hours"] > 1000 and "deadline 72.00 h" in local["reason"]
    code, result = invoke(cli_plan.plan_command, [path, "--any-cloud"])
    assert code == 0 and "no deadline in the job: the default of 72h applies (dlrun's default" in result.output


def test_the_default_deadline_comes_from_config_yaml(tmp_path, dlrun_home):
    path = job_file(tmp_path, RESNET50_IMAGENET)
    (dlrun_home / "config.yaml").write_text("default_deadline: 12h\n")
    data = plan_json(path)
    assert data["default_deadline"] == "12h" and data["chosen"]["estimate"]["hours"] <= 12
    assert str(dlrun_home / "config.yaml") in " ".join(data["notes"])
    # the job's own deadline wins, and then no default is mentioned
    data = plan_json(path, "--deadline", "200h")
    assert data["default_deadline"] is None and data["deadline_seconds"] == 200 * 3600


@pytest.mark.parametrize("text,what", [("default_deadline: soon\n", "default_deadline"),
                                       ("optimise: time\n", "unknown setting optimise"),
                                       ("optimize: speed\n", "optimize")])
def test_a_bad_config_file_is_one_line_and_exit_2(tmp_path, dlrun_home, text, what):
    (dlrun_home / "config.yaml").write_text(text)
    code, result = invoke(cli_plan.plan_command, [job_file(tmp_path, RESNET50_IMAGENET)])
    assert code == 2 and what in str(result.exception) and "config.yaml" in str(result.exception)


def test_optimize_time_picks_the_fastest_that_fits_and_cost_the_cheapest(tmp_path):
    path = job_file(tmp_path, RESNET50_IMAGENET)
    by_cost, by_time = plan_json(path, "--optimize", "cost"), plan_json(path, "--optimize", "time")
    feasible = [c for c in by_time["candidates"] if c["feasible"]]
    assert by_time["chosen"]["estimate"]["hours"] == min(c["estimate"]["hours"] for c in feasible)
    assert by_cost["chosen"]["estimate"]["cost"] == min(c["estimate"]["cost"] for c in feasible)
    assert by_time["chosen"]["estimate"]["hours"] < by_cost["chosen"]["estimate"]["hours"]
    assert by_time["optimize"] == "time" and by_cost["optimize"] == "cost"


def test_p4d_spot_in_us_east_1_is_priced_at_a_regular_zone_and_the_outlier_flagged(tmp_path):
    job = {**RESNET50_IMAGENET, "resources": {"accelerators": "A100:8", "clouds": ["aws"], "spot": "always"}}
    path = job_file(tmp_path, job)
    data = plan_json(path)
    p4d = next(c for c in data["candidates"] if c["key"] == "aws/us-east-1/p4d.24xlarge")
    assert p4d["estimate"]["price_per_hour"] == pytest.approx(7.8799)  # use1-az6, not use1-az1's 2.4655
    flag = data["zone_flags"]["aws/us-east-1/p4d.24xlarge"]
    assert "use1-az1 $2.47/h" in flag and "priced at use1-az6 $7.88/h" in flag
    code, result = invoke(cli_plan.plan_command, [path, "--any-cloud"])
    assert code == 0 and "use1-az1 $2.47/h" in result.output and "tried last" in result.output


def test_default_plan_fits_100_columns_with_human_durations_and_all_shows_the_rest(tmp_path):
    path = job_file(tmp_path, {"name": "t", "job": "cnn", "workload": TINY})
    code, result = invoke(cli_plan.plan_command, [path])
    assert code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 100
    table = [line for line in lines if " s " in line or " min " in line]
    assert table and len(table) <= 12
    assert "★" in result.output and " h " not in lines[0] and "0.00 h" not in result.output
    assert "why not" not in result.output  # every shown row fits: the column is left out
    code, everything = invoke(cli_plan.plan_command, [path, "--all"])
    assert code == 0 and len(everything.output.splitlines()) > len(lines) + 100
    data = plan_json(path)
    assert len(data["candidates"]) > 100  # --json keeps every candidate


def test_human_durations():
    from orchestrator.cli.render.plan_table import human_duration, money

    assert [human_duration(s) for s in (4, 4.16, 12, 360, 3.2 * 3600, 30 * 3600, 10 * 86400, 29909 * 3600)] == \
        ["4.0 s", "4.2 s", "12 s", "6 min", "3.2 h", "30 h", "10 d", "3.4 years"]
    # the one format everywhere: the result line, the progress lines and status (summary.duration) use it
    from orchestrator.cli.render.summary import duration

    assert [duration(s) for s in (None, 4.16, 42, 5400)] == ["?", "4.2 s", "42 s", "1.5 h"]
    assert [money(v) for v in (0, 0.004, 12.5, 36000)] == ["$0", "$0.004", "$12.50", "$36,000"]  # cost.usd


def test_the_choice_line_names_the_backend_time_cost_and_runner_up(tmp_path):
    from orchestrator.cli.render.plan_table import choice_line
    from orchestrator.planning.planner import plan_job
    from orchestrator.planning.spec import load_job

    plan = plan_job(load_job(job_file(tmp_path, RESNET50_IMAGENET)))
    line = choice_line(plan)
    second = plan.runner_up
    assert line.startswith(f"running on {plan.chosen.offer.label}") and "runner-up: " + second.offer.label in line
    assert second is not plan.chosen and second.feasible and "h," in line and "$" in line


def test_plot_marks_infeasible_apart_and_puts_free_local_at_zero(tmp_path):
    from orchestrator.cli.render.plot import plan_figure
    from orchestrator.planning.planner import plan_job
    from orchestrator.planning.spec import load_job

    spec = load_job(job_file(tmp_path, {"name": "t", "job": "cnn", "workload": TINY, "budget": {"max_cost": 0.03}}))
    plan = plan_job(spec)
    ax = plan_figure(plan).axes[0]
    assert ax.get_yscale() == "symlog"
    labels = {c.get_label(): c for c in ax.collections}
    hollow = [c for k, c in labels.items() if k.endswith("over budget/deadline")]
    filled = [c for k, c in labels.items() if k.endswith(("on-demand", "spot"))]
    assert hollow and filled
    assert all(len(c.get_facecolors()) == 0 or c.get_facecolors()[0][3] == 0 for c in hollow)
    assert all(c.get_facecolors()[0][3] > 0 for c in filled)
    local = labels["local on-demand"].get_offsets()
    assert local[0][1] == 0.0  # $0 drawn at 0, not at a floor
