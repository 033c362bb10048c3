"""Which prompt tokens made a causal language model say a continuation
(``pip install 'salience[torch]'`` and ``transformers``): the continuation's log-probability,
``log P(target | prompt) = sum_t log P(target_t | prompt, target_<t)``, attributed to the
prompt's tokens, as captum's ``LLMAttribution`` and ``LLMGradientAttribution`` do.

* Perturbation (any coalition explainer: ``occlusion`` is captum's ``FeatureAblation``,
  ``permutation_shapley`` its ``ShapleyValueSampling``, and ``kernel_shap``, ``lime``,
  ``exact_shapley``): an absent prompt token is replaced by ``baseline_token`` (default id
  0, captum's default), and the log-probability of every coalition is computed in batched
  forward passes over prompt + target (one pass per batch; captum runs one per coalition and,
  by default, one more per target token).
* ``integrated_gradients``: on the embedding layer, from the baseline token's embedding to
  each prompt token's, summed over the embedding dimensions, as captum's
  ``LayerIntegratedGradients`` on the input embeddings. The target's log-probability is a
  sum over its tokens and integrated gradients is linear in the output, so one integral of
  the sum equals captum's one integral per target token.

Prompts are tokenized without special tokens unless ``add_special_tokens=True`` (the
tokenizer's default, as captum's ``TextTokenInput`` does); the target never gets them. A
prompt and target longer than the model's window are refused, or cut from the prompt's start
with ``truncate=True`` (stated in ``info["truncated_tokens"]``).
"""

from __future__ import annotations

import numpy as np

from salience.core.base import Scorer, create, register_method, registered_name
from salience.core.checks import check_k
from salience.core.params import Check, Interval, Options
from salience.exceptions import InvalidParameterError
from salience.explain.attribution import Attribution
from salience.explain.gradients import RULES, _rule, _torch
from salience.models.answering import continuation_logits, target_log_probs
from salience.extras import torch

__all__ = ["LMAttribution", "lm_methods"]


def lm_methods() -> tuple[str, ...]:
    """The attribution methods a prompt can be explained by: every model-agnostic ``explain``
    method of the registry, and integrated gradients on the embeddings."""
    from salience.explain.shapley import model_agnostic_methods

    return model_agnostic_methods() + ("integrated_gradients",)


def _is_lm_method(value) -> bool:
    from salience.explain.base import Explainer

    if isinstance(value, str):
        return value in lm_methods()
    return isinstance(value, Explainer) and value.model_agnostic


def _is_tokenizer(value) -> bool:
    return callable(getattr(value, "encode", None)) and callable(getattr(value, "decode", None))


@register_method("prompt", "lm", "a causal language model's continuation attributed to its prompt's tokens "
                 "(perturbation methods or integrated gradients on the embeddings, as captum's LLMAttribution)")
class LMAttribution(Scorer):
    """``LMAttribution(model, tokenizer=tokenizer, method="occlusion").attribute(prompt,
    target=continuation, n_samples=None, batch_size=None, seed=0)`` returns an
    :class:`~salience.explain.Attribution` with one value per prompt token (``feature_names``
    the tokens' text), ``base_value`` the log-probability with every token absent and
    ``info["log_prob"]`` the continuation's log-probability given the whole prompt;
    ``score(prompt, target=...)`` the same as :class:`~salience.Scores` over the tokens.
    ``method``: a model-agnostic ``explain`` method's name (at its defaults), ``"integrated_gradients"``,
    or such a method built with its own parameters on the model, as captum wraps one
    (``create("explain", "kernel_shap", model=model, n_designs=4)``, captum's
    ``LLMAttribution(FeatureAblation(model), tokenizer)``): a copy of it explains the
    continuation's log-probability of prompts with tokens absent. ``n_steps`` (default 50, captum's), ``rule``
    and ``per_target_token`` to integrated gradients: by default one integral of the
    continuation's summed log-probability; with ``per_target_token=True`` one per target token
    (its log-probability given the prompt and the target before it, as captum's
    ``LLMGradientAttribution``), summed: the same values up to float32 rounding, about as many
    times slower as the target has tokens."""

    _parameter_constraints = {
        "model": [callable], "tokenizer": [Check(_is_tokenizer, "a tokenizer (with encode and decode)")],
        "method": [Check(_is_lm_method, "a model-agnostic explain method (a name or one built) or "
                                        "'integrated_gradients'")],
        "baseline_token": [Interval("int", 0)], "add_special_tokens": [bool],
        "truncate": [bool], "n_steps": [Interval("int", 1)], "rule": [Options(RULES)], "per_target_token": [bool]}

    def __init__(self, model, *, tokenizer, method="occlusion", baseline_token: int = 0, add_special_tokens: bool = True,
                 truncate: bool = False, n_steps: int = 50, rule: str = "gausslegendre", per_target_token: bool = False):
        self.model, self.tokenizer, self.method = model, tokenizer, method
        self.baseline_token, self.add_special_tokens, self.truncate = baseline_token, add_special_tokens, truncate
        self.n_steps, self.rule, self.per_target_token = n_steps, rule, per_target_token
        if isinstance(method, str) and method not in lm_methods():
            from salience.exceptions import unknown_choice

            raise unknown_choice("language-model attribution method", method, lm_methods())
        self._validate_params()

    @property
    def method_name(self) -> str:
        """The attribution method's name (a built one's registered name)."""
        return self.method if isinstance(self.method, str) else registered_name(self.method, "explain")

    def _perturbation(self, model):
        """The perturbation method explaining ``model`` (masks -> log-probabilities): built at
        its defaults from a name, or a copy of the one given with its model replaced."""
        if isinstance(self.method, str):
            return create("explain", self.method, model=model)
        return self.method.clone().set_params(model=model)

    def score(self, prompt: str, *, target: str, **options):
        """The attribution of ``prompt`` as :class:`~salience.Scores` over its tokens (a repeated
        token's id carries ``#2``, ``#3``, ...)."""
        return self.attribute(prompt, target=target, **options).to_scores()

    def score_batch(self, prompts, *, target: str, **options) -> list:
        """``score`` of each prompt, for one continuation."""
        return [self.score(prompt, target=target, **options) for prompt in prompts]

    def _tokens(self, prompt: str, target: str):
        if not isinstance(prompt, str) or not prompt.strip():
            raise InvalidParameterError("prompt must be a non-empty text.")
        if not isinstance(target, str) or not target.strip():
            raise InvalidParameterError("target must be a non-empty text: the continuation whose log-probability is "
                                        "explained.")
        prompt_ids = list(self.tokenizer.encode(prompt, add_special_tokens=self.add_special_tokens))
        target_ids = list(self.tokenizer.encode(target, add_special_tokens=False))
        window = getattr(getattr(self.model, "config", None), "max_position_embeddings", None)
        cut = 0
        if window is not None and len(prompt_ids) + len(target_ids) > window:
            if not self.truncate or len(target_ids) >= window:
                raise InvalidParameterError(
                    f"prompt ({len(prompt_ids)} tokens) and target ({len(target_ids)}) exceed the model's window of "
                    f"{window} tokens: shorten them, or pass truncate=True to drop the prompt's first tokens.")
            cut = len(prompt_ids) + len(target_ids) - window
            prompt_ids = prompt_ids[cut:]
        return prompt_ids, target_ids, cut

    def attribute(self, prompt: str, *, target: str, baselines=None, n_samples: int | None = None,
                  batch_size: int | None = None, seed: int | None = 0) -> Attribution:
        if baselines is not None:
            raise InvalidParameterError("baselines do not apply: an absent token is replaced by baseline_token.")
        if batch_size is not None:
            batch_size = check_k(batch_size, "batch_size")
        torch = _torch()
        prompt_ids, target_ids, cut = self._tokens(prompt, target)
        names = [self.tokenizer.decode([t]) for t in prompt_ids]
        prompt_t = torch.tensor(prompt_ids)
        target_t = torch.tensor(target_ids)
        if self.method_name == "integrated_gradients":
            values, base, calls, log_prob = self._integrated_gradients(prompt_t, target_t,
                                                                       batch_size or self.n_steps)
        else:
            whole = []  # the whole prompt's log-probability, where the method evaluates it

            def model(masks: np.ndarray) -> np.ndarray:
                present = masks > 0.5
                ids = torch.where(torch.as_tensor(present), prompt_t[None, :], torch.tensor(self.baseline_token))
                step = batch_size or 16
                with torch.no_grad():
                    out = np.concatenate([self._log_probs(ids[lo : lo + step], target_t).numpy()
                                          for lo in range(0, len(ids), step)])
                whole.extend(out[present.all(axis=1)][:1].tolist())
                return out

            explainer = self._perturbation(model)
            m = len(prompt_ids)
            result = explainer.attribute(np.ones(m), baselines=np.zeros(m), n_samples=n_samples, seed=seed)
            values, base, calls = result.values[0], float(result.base_value[0]), result.model_calls
            if whole:
                log_prob = whole[0]
            else:
                with torch.no_grad():
                    log_prob = float(self._log_probs(prompt_t[None, :], target_t)[0])
        ends = np.cumsum([len(name) for name in names]).tolist()
        info = {"log_prob": log_prob, "prompt_ids": prompt_ids, "target_ids": target_ids, "truncated_tokens": cut,
                "text": "".join(names), "spans": list(zip([0] + ends[:-1], ends)), "target": target}
        return Attribution(np.asarray(values, dtype=np.float64)[None, :], np.array([base]), self.method_name, calls, names,
                           info)

    def _log_probs(self, prompt_ids, target_ids):
        """log P(target | prompt) for each row of prompt ids, one forward pass over the batch.
        The input holds the whole target, its last token included though it predicts nothing,
        as captum's: the same shapes round alike in float32 (one position shorter differs by
        about 1e-5 on a sum of log-probabilities)."""
        ids = torch.cat([prompt_ids, target_ids[None, :].expand(len(prompt_ids), -1)], dim=1)
        logits = self._logits(input_ids=ids, n_keep=len(target_ids) + 1)[:, :-1]
        return self._target_log_probs(logits, target_ids)

    def _logits(self, *, n_keep: int, **inputs):
        return continuation_logits(self.model, n_keep=n_keep, **inputs)

    @staticmethod
    def _target_log_probs(logits, target_ids):
        return target_log_probs(logits, target_ids)

    def _integrated_gradients(self, prompt_ids, target_ids, batch_size):
        """(values, base, calls, log_prob): the quadrature's points in batches of forward and
        backward passes; the whole prompt's and the baseline's log-probabilities ride along in
        the first batch of each integral as two more rows, outside the gradient."""
        embed = self.model.get_input_embeddings()
        with torch.no_grad():
            x = embed(prompt_ids[None, :])[0]
            b = embed(torch.full_like(prompt_ids, self.baseline_token)[None, :])[0]
            t = embed(target_ids[None, :])[0]
        points, weights = _rule(self.rule, self.n_steps)
        # (the target's embeddings after the prompt, the tokens predicted, whether the input
        # holds the last of them): the whole target at once, as _log_probs reads it, or token i
        # after the target before it
        if self.per_target_token:
            integrals = [(t[:i], target_ids[i : i + 1], False) for i in range(len(target_ids))]
        else:
            integrals = [(t, target_ids, True)]
        values, ends = [], torch.zeros(2, dtype=torch.float64)
        for context, predicted, holds_last in integrals:
            total = torch.zeros_like(x)
            first = True
            for lo in range(0, len(points), batch_size):
                alphas = torch.tensor(points[lo : lo + batch_size], dtype=x.dtype)[:, None, None]
                path = (b[None] + alphas * (x - b)[None]).detach().requires_grad_(True)
                rows = torch.cat([path, torch.stack([x, b])]) if first else path
                inputs = torch.cat([rows, context[None].expand(len(rows), -1, -1)], dim=1)
                logits = self._logits(inputs_embeds=inputs, n_keep=len(predicted) + holds_last)
                logits = logits[:, :-1] if holds_last else logits
                out = self._target_log_probs(logits, predicted)
                if first:
                    out, ends = out[: len(path)], ends + out[len(path) :].detach()
                    first = False
                (grads,) = torch.autograd.grad(out.sum(), path)
                w = torch.tensor(weights[lo : lo + batch_size], dtype=grads.dtype)[:, None, None]
                total += (grads * w).sum(dim=0)
            values.append(((x - b) * total).sum(dim=1).detach())
        # per token, summed in the model's precision as captum sums its tokens' attributions
        summed = torch.stack(values).sum(dim=0).double().numpy()
        return summed, float(ends[1]), self.n_steps * len(integrals), float(ends[0])
