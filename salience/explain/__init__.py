"""Which input features mattered for a model's output: attribution methods with one signature,
``Method(model, **options).attribute(inputs, *, baselines=None, target=None, n_samples=None,
batch_size=None, seed=0)``, each returning an :class:`Attribution`."""

from salience.explain.attention import AttentionFlow, AttentionRollout
from salience.models.encoders import load_transformer
from salience.explain.attribution import Attribution, ModelCalls
from salience.explain.gradients import DeepLift, InputXGradient, IntegratedGradients, Saliency, SmoothGrad
from salience.explain.importance import GlobalImportance, mean_abs_attribution, permutation_importance
from salience.explain.lm import LMAttribution
from salience.models.lm import load_causal_lm
from salience.explain.rise import Rise
from salience.explain.shapley import (Banzhaf, ExactShapley, Explainer, KernelShap, Lime, Occlusion, PermutationShapley,
                                      ShapleyInteraction)
from salience.explain.text import attribute_text, attribution_html, text_units
from salience.explain.verify_features import FeatureVerifier
from salience.explain.context_base import ContextAttribution
from salience.explain.context_cite import ContextCite
from salience.explain.context_loo import LeaveOneOut
from salience.explain.context_attention import AttentionAttribution
from salience.explain.context_shap import ContextShap
from salience.explain.context_gradient import GradientAttribution

__all__ = ["Attribution", "ModelCalls", "Explainer", "ExactShapley", "KernelShap", "PermutationShapley", "Banzhaf",
           "ShapleyInteraction", "Occlusion", "Lime", "Rise", "Saliency", "InputXGradient", "IntegratedGradients", "SmoothGrad",
           "DeepLift", "AttentionRollout", "AttentionFlow", "load_transformer", "LMAttribution", "load_causal_lm", "GlobalImportance", "permutation_importance", "mean_abs_attribution", "attribute_text",
           "attribution_html", "text_units", "FeatureVerifier", "ContextAttribution", "ContextCite", "LeaveOneOut", "AttentionAttribution", "ContextShap", "GradientAttribution"]
