"""The boot script's torch install and GPU check: torch from the planned wheel index, then, on a GPU
offer, `nvidia-smi` must show the offer's GPU count and memory and `torch.cuda.is_available()` must hold
in the venv, before Ray starts; otherwise the boot fails with the reason ($NODE_DIR/failed), so that dlrun
tries the next candidate instead of training on CPU while a GPU is billed."""
from __future__ import annotations

import shlex

from infra.base import BootstrapConfig

# nvidia-smi reports a little less than the board's nominal memory (a 16 GB T4 shows 15360 MiB)
MEMORY_SHARE = 0.9


def is_torch(requirement: str) -> bool:
    name = requirement.strip().split(";")[0]
    for stop in "<>=!~[ @":
        name = name.split(stop)[0]
    return name.strip().lower() == "torch"


def torch_install(cfg: BootstrapConfig) -> list[str]:
    """The boot script's install of the planned torch (nothing when no torch is planned: then plain `torch`
    comes with the other packages from the PyPI index). The torch index is searched first and PyPI's
    second (uv: an --extra-index-url before the --index-url; per package the first index that has it), so
    torch and what its index hosts come from there (download.pytorch.org hosts all of torch's
    dependencies) and a mirror that holds only torch's own wheels still works."""
    if not (cfg.torch_requirement and cfg.torch_index_url):
        return []
    req, index = shlex.quote(cfg.torch_requirement), shlex.quote(cfg.torch_index_url)
    return [f'uv_install {req} {index} --index-url "$PIP_INDEX" --extra-index-url {index} {req}']


def nvidia_smi_check(cfg: BootstrapConfig) -> list[str]:
    if cfg.gpu_count <= 0:
        return []
    want, min_mib = int(cfg.gpu_count), int(cfg.gpu_memory_gb * 1024 * MEMORY_SHARE)
    offer = f"{want} GPU(s) of {cfg.gpu_memory_gb:g} GB"
    return [
        "command -v nvidia-smi >/dev/null || fail "
        + shlex.quote(f"GPU check: no nvidia-smi on this image (no NVIDIA driver); the offer has {offer}"),
        'SMI=$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits 2>&1) '
        "|| fail \"GPU check: nvidia-smi failed: $(printf '%s' \"$SMI\" | head -c 300 | tr '\\n' ' ')\"",
        'echo "nvidia-smi: $SMI"',
        "GPUS=$(printf '%s\\n' \"$SMI\" | grep -c . || true)",
        f'[ "$GPUS" -ge {want} ] || fail "GPU check: nvidia-smi shows $GPUS GPU(s), the offer has {want}: '
        "$(printf '%s' \"$SMI\" | tr '\\n' ';')\"",
        f"printf '%s\\n' \"$SMI\" | awk -F', *' -v min={min_mib} '($2 + 0) < min {{bad = 1}} END {{exit bad}}' "
        f"|| fail \"GPU check: a GPU has less than {min_mib} MiB (the offer's {cfg.gpu_memory_gb:g} GB): "
        "$(printf '%s' \"$SMI\" | tr '\\n' ';')\"",
    ]


def torch_cuda_check(cfg: BootstrapConfig, python: str, why: str = "") -> list[str]:
    if cfg.gpu_count <= 0:
        return []
    probe = ("import sys, torch; n = torch.cuda.device_count() if torch.cuda.is_available() else 0; "
             "print('torch', torch.__version__, 'CUDA', torch.version.cuda, 'GPUs', n); "
             f"sys.exit(0 if n >= {int(cfg.gpu_count)} else 1)")
    why = why or (f"GPU check: torch.cuda.is_available() is false in the venv ({cfg.torch_requirement or 'torch'} from "
           f"{cfg.torch_index_url or 'the default index'}): this driver does not run that torch's CUDA")
    return [f"{python} -c {shlex.quote(probe)} || fail {shlex.quote(why)}"]
