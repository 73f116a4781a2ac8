"""Other tools' names for a gateway config's keys, for the message a config that uses one gets
(pure data; read by ``deploy.unknown_keys`` through ``GatewayConfig.TERMS_ELSEWHERE``).

Off the request path: ``turnout serve --config``. People come to Turnout from LiteLLM's proxy
config (``model_list``, ``litellm_params``, ``api_base``, ``master_key``), from Triton's
dynamic batcher and from vLLM's flags; a misplaced or foreign key is told what it is here.
"""

from __future__ import annotations

CONFIG_TERMS: dict[str, str] = {
    # LiteLLM's proxy config
    "model_list": "LiteLLM's model_list is two sections here: 'variants' (how each model is "
    "reached: kind, base_url, model) and 'routes' (the model names clients ask for)",
    "litellm_params": "LiteLLM's litellm_params are a variant's own keys here (kind: openai_http, "
    "base_url, model, api_key)",
    "model_name": "LiteLLM's model_name is a route's name here: routes: {NAME: {targets: [...]}}",
    "api_base": "LiteLLM's api_base is 'base_url' here",
    "master_key": "LiteLLM's master_key is an admin token here: $TURNOUT_ADMIN_TOKEN "
    "(auth.admin_token_env), or `turnout keys create NAME --role admin`",
    "general_settings": "LiteLLM's general_settings are 'server' and 'auth' here",
    "model_info": "LiteLLM's model_info.mode is a variant's 'task' here (task: embed for an "
    "embedding model, task: generate for a chat one; unset: both)",
    "router_settings": "LiteLLM's router_settings are each route's own keys here (targets with "
    "weights, fallbacks, retries)",
    # Triton's dynamic batcher and vLLM's flags, for an embedded variant's batching
    "max_queue_delay_microseconds": "Triton's max_queue_delay_microseconds is "
    "'batching.max_queue_delay_ms' here, in milliseconds",
    "max_num_seqs": "vLLM's --max-num-seqs is 'batching.max_batch_size' here",
}
