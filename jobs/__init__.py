"""Real training programs, runnable on CPU or CUDA. No torch import here (the CLI imports this)."""

# name -> (module run with `python -m`, workload model factory)
BUILTIN_JOBS = {
    "cnn": ("jobs.cnn", "jobs.cnn:SimpleCNN"),
    "lstm": ("jobs.lstm", "jobs.lstm:StackedLSTM"),
    "resnet": ("jobs.resnet", "jobs.resnet:ResNetSmall"),
}
