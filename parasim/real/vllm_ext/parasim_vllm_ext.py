"""A vLLM worker extension for in-place weight reloads that also refresh derived weight copies.

Loaded inside the vLLM server (its own virtual environment, without parasim installed) as a top-level module:
``parasim serve-pool`` puts this directory on ``PYTHONPATH`` and passes
``--worker-extension-cls parasim_vllm_ext.WeightSyncExtension`` for models marked ``reloadable``. vLLM mixes the
class into its worker, so ``POST /collective_rpc {"method": "parasim_reload_weights", ...}`` reaches it.

Why it exists: vLLM 0.32's in-place ``reload_weights`` re-processes only layers that received weights. With tied
embeddings (Qwen3-4B, the tiny test model) ``lm_head.weight`` is skipped as an alias of ``embed_tokens.weight``;
on CPU the LM head computes logits through a oneDNN handle packed from the old weight at load time, so after a
reload the model embeds with new weights and scores with old ones. Re-running the LM head's post-load processing
rebuilds that handle from the (shared, already updated) weight; on GPU the processing is a no-op.
"""


class WeightSyncExtension:
    """Methods added to vLLM's worker (``self`` is the worker: ``self.model_runner`` holds the model)."""

    def parasim_reload_weights(self, weights_path: str) -> int:
        """Reload every weight from ``weights_path`` in place, then refresh the LM heads; returns heads refreshed."""
        self.reload_weights(weights_path=weights_path)
        return self.parasim_refresh_lm_heads()

    def parasim_refresh_lm_heads(self) -> int:
        """Re-run post-load processing of every LM head (cheap: one repack of one matrix)."""
        from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

        refreshed = 0
        for module in self.model_runner.get_model().modules():
            method = getattr(module, "quant_method", None)
            if isinstance(module, ParallelLMHead) and hasattr(method, "process_weights_after_loading"):
                method.process_weights_after_loading(module)
                refreshed += 1
        return refreshed
