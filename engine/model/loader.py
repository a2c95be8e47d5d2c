"""HF checkpoint directories (config.json + *.safetensors): strict load and save.

Every tensor is checked by name, shape and dtype; a missing, extra or mis-shaped tensor is a
one-line ValueError naming it.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from engine.core.guarded_read import read_json
from engine.model.alloc import default_dtype, empty_model
from engine.model.config import OuroConfig
from engine.model.ouro import OuroForCausalLM

_FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def read_config(path: str | Path) -> OuroConfig:
    cfg_path = Path(path) / "config.json"
    if not cfg_path.is_file():
        raise ValueError(f"checkpoint {str(path)!r}: no config.json")
    raw = read_json(cfg_path)  # FileReadError (a ValueError) names the file and position
    if not isinstance(raw, dict):
        raise ValueError(f"{cfg_path}: must hold a JSON object, not {type(raw).__name__}")
    try:
        return OuroConfig.from_hf_dict(raw)
    except (ValueError, TypeError) as err:
        raise ValueError(f"{cfg_path}: {str(err).removeprefix('config.json: ')}") from None


def _shape(t: tuple[int, ...] | torch.Size) -> str:
    return "[" + ", ".join(str(d) for d in t) + "]"



def _check_readable(file: Path) -> None:
    """ValueError naming ``file`` when it is not a safetensors file (a truncated download,
    another format under the name): safetensors' own error would not name it."""
    try:
        with safe_open(str(file), framework="pt", device="cpu") as f:
            f.keys()
    except (SafetensorError, OSError) as err:
        raise ValueError(f"{file}: not a readable safetensors file ({err}); "
                         "re-save or download it again") from None


@torch.no_grad()
def load_checkpoint(
    path: str | Path,
    *,
    device: torch.device | str = "cpu",
    dtype: torch.dtype | None = None,
) -> OuroForCausalLM:
    """Load an Ouro checkpoint directory onto ``device`` in ``dtype`` (default: fp32 on CPU,
    bf16 on CUDA)."""
    path = Path(path)
    cfg = read_config(path)
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ValueError(f"checkpoint {str(path)!r}: no *.safetensors files")
    model = empty_model(cfg, device, dtype or default_dtype(device))
    expected = model.state_dict()
    seen: set[str] = set()
    for file in files:
        _check_readable(file)
        with safe_open(str(file), framework="pt", device="cpu") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                if name not in expected:
                    raise ValueError(f"checkpoint: unexpected tensor {name!r} in {file.name}")
                if name in seen:
                    raise ValueError(f"checkpoint: tensor {name!r} appears in two files")
                tensor = f.get_tensor(name)
                want = expected[name]
                if tuple(tensor.shape) != tuple(want.shape):
                    raise ValueError(
                        f"checkpoint: tensor {name!r} has shape {_shape(tensor.shape)}, "
                        f"expected {_shape(want.shape)}"
                    )
                if tensor.dtype not in _FLOAT_DTYPES:
                    raise ValueError(
                        f"checkpoint: tensor {name!r} has dtype {tensor.dtype}, expected one of "
                        "bfloat16, float16, float32"
                    )
                want.copy_(tensor)
                seen.add(name)
    missing = [n for n in expected if n not in seen]
    if missing:
        raise ValueError(f"checkpoint: missing tensor {missing[0]!r} ({len(missing)} missing)")
    return model


def save_checkpoint(
    model: OuroForCausalLM, path: str | Path, *, dtype: torch.dtype | None = None
) -> None:
    """Write config.json and model.safetensors in HF layout (``dtype``: default the model's)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tensors = {
        name: t.detach().to("cpu", dtype or t.dtype).contiguous()
        for name, t in model.state_dict().items()
    }
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    (path / "config.json").write_text(json.dumps(model.config.to_hf_dict(), indent=2) + "\n")
