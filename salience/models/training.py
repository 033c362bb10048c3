"""The training loop the rerankers made here share (the cross-encoder, the domain-adapted
bi-encoder): training groups of (query, positive passage, negative passages) taken in a seeded
order, AdamW with a linear warm-up, bfloat16 autocast as an option, a time budget, checkpoints
beside the output that a killed run resumes from (refused when the settings differ), and the
result written whole or not at all. What a step computes is the caller's ``loss``."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from salience.exceptions import InvalidParameterError, MissingDependencyError
from salience.extras import install_hint
from salience.extras import torch

__all__ = ["MIN_GROUPS", "Groups", "check_training", "copy_model_files", "negatives_of", "require_torch",
           "train_groups", "write_report"]

MIN_GROUPS = 16  # fewer training groups than this teach a model nothing
#: a checkpoint at least this often besides every ``checkpoint_every`` steps: at a few steps a minute
#: (MiniLM on 2 cores) a kill then loses minutes of training, not the whole run
CHECKPOINT_SECONDS = 120.0
Groups = Sequence[tuple[str, str, Sequence[str]]]


def require_torch():
    try:
        import torch
        import transformers
    except ImportError:
        raise MissingDependencyError(f"training a reranker needs torch and transformers: {install_hint('embed')}") \
            from None
    return torch, transformers


def check_training(groups: Groups, *, minutes: float, epochs: int, batch_size: int, learning_rate: float,
                   warmup_steps: int, precision: str, seed: int, checkpoint_every: int, show_progress: bool,
                   **whole_numbers: tuple[int, int]) -> tuple[list[tuple[str, str, list[str]]], dict]:
    """The groups as lists and the loop's options for :func:`train_groups`, after every option
    is checked (``whole_numbers``: the trainer's own, name -> (value, lowest allowed))."""
    groups = [(q, p, list(n)) for q, p, n in groups]
    if len(groups) < MIN_GROUPS:
        raise InvalidParameterError(f"{len(groups)} training groups: at least {MIN_GROUPS} are needed (make pairs "
                                    "with salience search queries on a larger corpus).")
    whole_numbers |= {"epochs": (epochs, 1), "batch_size": (batch_size, 1), "warmup_steps": (warmup_steps, 0),
                      "checkpoint_every": (checkpoint_every, 1)}
    for name, (value, low) in whole_numbers.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise InvalidParameterError(f"{name} must be a whole number >= {low}; got {value!r}.")
    if not (minutes > 0 and learning_rate > 0):
        raise InvalidParameterError(f"minutes and learning_rate must be > 0; got {minutes!r}, {learning_rate!r}.")
    if precision not in ("fp32", "bf16"):
        raise InvalidParameterError(f"training precision must be fp32 or bf16; got {precision!r}.")
    return groups, {"minutes": minutes, "epochs": epochs, "batch_size": batch_size, "learning_rate": learning_rate,
                    "warmup_steps": warmup_steps, "precision": precision, "seed": seed,
                    "checkpoint_every": checkpoint_every, "show_progress": show_progress}


def negatives_of(groups: list, index: int, negatives: int, positives: list[str]) -> list[str]:
    """Group ``index``'s first ``negatives`` negatives, made up to that number with the next
    groups' positives (and empty passages when every positive is the same text)."""
    query, positive, negs = groups[index]
    negs = negs[:negatives]
    for j in range(1, len(groups)):
        if len(negs) >= negatives:
            break
        other = positives[(index + j) % len(groups)]
        if other != positive:
            negs = negs + [other]
    return negs + [""] * (negatives - len(negs))


def train_groups(model, groups: list, out: Path, *, loss: Callable, save: Callable[[Path, dict], None],
                 settings: dict, minutes: float, epochs: int, batch_size: int, learning_rate: float,
                 warmup_steps: int, precision: str, seed: int, checkpoint_every: int, show_progress: bool,
                 report: dict, parameter_groups: list[dict] | None = None) -> dict:
    """Train ``model`` on ``groups``: each step ``loss(indices)`` (a scalar tensor, computed
    under autocast when ``precision`` is bf16) is minimised with AdamW; stops after ``epochs``
    passes or ``minutes``; then ``save(folder, report)`` writes the result into a folder that
    replaces ``out`` whole. Returns the report (steps, seconds, first and last losses,
    ``settings`` and the caller's ``report``). ``parameter_groups``: the optimizer's groups
    (``params`` and their own ``lr``) where some parameters learn at another rate than
    ``learning_rate``; the warm-up scales each group's rate alike."""
    from salience.io.files import atomic_directory
    from salience.models.folders import owns_model_file
    from salience.parallel import progress_bar

    work = out.parent / f".{out.name}.training"
    optimizer = torch.optim.AdamW(parameter_groups or [p for p in model.parameters() if p.requires_grad],
                                  lr=learning_rate)
    rates = [group["lr"] for group in optimizer.param_groups]
    order = np.concatenate([np.random.default_rng(seed + e).permutation(len(groups)) for e in range(epochs)])
    steps = len(order) // batch_size
    step, spent, losses = 0, 0.0, []
    checkpoint = work / "checkpoint.pt"
    if checkpoint.is_file():
        state = torch.load(checkpoint, weights_only=False)
        if state["settings"] != settings:
            changed = {k: (state["settings"].get(k), v) for k, v in settings.items() if state["settings"].get(k) != v}
            raise InvalidParameterError(f"{work} holds a checkpoint of another training run ({changed}: checkpoint, "
                                        f"now); remove it or train with the same settings.")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step, spent, losses = state["step"], state["seconds"], state["losses"]
        torch.set_rng_state(state["torch_rng"])
    started = time.perf_counter() - spent
    last_checkpoint = time.perf_counter()
    model.train()
    with progress_bar(steps, "training", show_progress, unit="step") as bar:
        bar.update(step)
        while step < steps and time.perf_counter() - started < minutes * 60:
            for group, rate in zip(optimizer.param_groups, rates):
                group["lr"] = rate * min(1.0, (step + 1) / (warmup_steps + 1))
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
                value = loss([int(i) for i in order[step * batch_size : (step + 1) * batch_size]])
            optimizer.zero_grad()
            value.backward()
            optimizer.step()
            losses.append(value.item())
            step += 1
            bar.update(1)
            now = time.perf_counter()
            if step < steps and (step % checkpoint_every == 0 or now - last_checkpoint >= CHECKPOINT_SECONDS):
                _save_checkpoint(work, model, optimizer, settings, step, now - started, losses)
                last_checkpoint = now
    seconds = time.perf_counter() - started
    model.eval()
    done = {**report, "steps": step, "planned_steps": steps, "seconds": round(seconds, 1),
            "stopped_by": "epochs" if step >= steps else "time budget",
            "loss_first": round(float(np.mean(losses[:20])), 4) if losses else None,
            "loss_last": round(float(np.mean(losses[-20:])), 4) if losses else None, **settings}
    with atomic_directory(out, owned=owns_model_file) as tmp:  # the user's files there stay
        save(tmp, done)
    shutil.rmtree(work, ignore_errors=True)  # finished: the checkpoint is not needed
    return done


def copy_model_files(base: Path, out: Path) -> None:
    """``base``'s files but its weights and any trainer's report (tokenizer, sentence-transformers
    modules and pooling), so that the trained weights saved beside them make a whole folder."""
    weights = ("*.safetensors", "*.bin", "*.h5", "*.msgpack", "*.ot", "onnx", "openvino")
    shutil.copytree(base, out, dirs_exist_ok=True, ignore=shutil.ignore_patterns(*weights, "bi.json", "cross.json"))


def write_report(folder: Path, name: str, report: dict) -> None:
    (folder / name).write_text(json.dumps(report, indent=1), encoding="utf-8")


def _save_checkpoint(work: Path, model, optimizer, settings: dict, step: int, seconds: float,
                     losses: list) -> None:
    """Written atomically: a kill leaves the last whole checkpoint."""
    import io

    from salience.io.files import atomic_write_bytes

    work.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save({"settings": settings, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "step": step, "seconds": seconds, "losses": losses, "torch_rng": torch.get_rng_state()}, buffer)
    atomic_write_bytes(work / "checkpoint.pt", buffer.getvalue())
