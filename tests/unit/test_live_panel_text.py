"""The live panel shows what it is given as text, never as rich markup: a backend, a metric name or a job name
with '[' in it is shown as written, and no '[bold]'-like tag reaches the screen."""
import io

from orchestrator.cli.render.display import JobView, RichDisplay


def test_names_with_brackets_are_shown_as_written():
    stream = io.StringIO()
    d = RichDisplay(stream)
    d.update(JobView(job_id="j-1", name="mine", phase="planning", backend="cluster:lab [team]",
                     metrics={"acc[top1]": 0.5}))
    d.close()
    shown = stream.getvalue()
    assert "planning on cluster:lab [team]" in shown and "acc[top1] 0.5" in shown
    assert "[bold]" not in shown and "[/]" not in shown
