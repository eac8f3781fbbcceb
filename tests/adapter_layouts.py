"""PEFT LoRA adapters of the tiny test models, made offline with peft (a test dependency only) and saved as peft saves.

lora_B starts at zero in peft (the adapter changes nothing until trained): init_lora_weights=False
draws both A and B at random, so every adapter changes the answer, each differently (its seed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def build_adapter(base_dir: Path, dest: Path, seed: int, task_type: str | None = None, r: int = 4,
                  alpha: int = 8, targets: tuple[str, ...] = ("query", "value"), use_rslora: bool = False,
                  perturb_saved: bool = True) -> Path:
    """A LoRA adapter of the model in base_dir (its config's class), saved with save_pretrained in dest."""
    import torch
    from peft import LoraConfig, get_peft_model

    dest = Path(dest)
    if (dest / "adapter_config.json").is_file():
        return dest
    model = base_model(base_dir, task_type)
    torch.manual_seed(seed)
    config = LoraConfig(r=r, lora_alpha=alpha, target_modules=list(targets), init_lora_weights=False,
                        use_rslora=use_rslora, task_type=task_type)
    peft_model = get_peft_model(model, config)
    if task_type is not None and perturb_saved:  # the adapter's own classifier head (modules_to_save) differs too
        with torch.no_grad():
            for name, parameter in peft_model.named_parameters():
                if "modules_to_save" in name:
                    parameter.add_(torch.randn_like(parameter) * 0.5)
    peft_model.save_pretrained(str(dest))
    return dest


# GPT-2's attention and MLP layers (Conv1D: peft saves their adapters with fan_in_fan_out).
GPT2_TARGETS = ("c_attn", "c_proj", "c_fc")


def base_model(base_dir: Path, task_type: str | None = None) -> Any:
    """The base as the adapter is trained on it: a BertModel, a sequence classifier for SEQ_CLS, a causal LM for
    CAUSAL_LM."""
    from transformers import AutoModel, AutoModelForCausalLM, AutoModelForSequenceClassification

    model_class = {"SEQ_CLS": AutoModelForSequenceClassification,
                   "CAUSAL_LM": AutoModelForCausalLM}.get(task_type or "", AutoModel)
    return model_class.from_pretrained(str(base_dir)).eval()


def merged_model(base_dir: Path, adapter_dir: Path, task_type: str | None = None) -> Any:
    """The base with the adapter merged in by peft itself (the reference answer)."""
    from peft import PeftModel

    return PeftModel.from_pretrained(base_model(base_dir, task_type), str(adapter_dir)).merge_and_unload().eval()
