"""Text a real vLLM 0.32.0 printed on this machine (CPU build), for tests that match its shape."""

# `repro sweep --profile cpu-tiny --set serve.num-gpu-blocks-override=8` (max-model-len 4096,
# CPU block size 128: 8 blocks, 7 usable after the null block = 896 tokens): the engine core's
# ValueError from `_check_enough_kv_cache_memory`.
CPU_REFUSAL = (
    "To serve at least one request with the model's max seq len (4096), (0.0 GiB KV cache is "
    "needed, which is larger than the available KV cache memory (0.0 GiB). Based on the "
    "available memory, the estimated maximum model length is 896. Try increasing "
    "`gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing "
    "`max_model_len` when initializing the engine. See "
    "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
)
