/* The CPU backend's kernel table: fp32 kernels from this directory, matmuls
 * through oneDNN (matmul.c), everything else plain C + OpenMP written to
 * auto-vectorize. Every entry is deterministic for any thread count except
 * matmul, which is deterministic for a fixed thread count (oneDNN's split). */
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/quant8.h"

static const struct st_ops cpu_table = {
	.name = "cpu",
	.matmul_lib = "oneDNN dnnl_sgemm (f32)",
	.matmul = cpu_matmul,
	.matmul_bf16 = cpu_matmul_bf16,
	.matmul_bf16_native = cpu_matmul_bf16_native,
	.embedding_forward = cpu_embedding_forward,
	.embedding_backward = cpu_embedding_backward,
	.rmsnorm_forward = cpu_rmsnorm_forward,
	.rmsnorm_backward = cpu_rmsnorm_backward,
	.layernorm_forward = cpu_layernorm_forward,
	.layernorm_backward = cpu_layernorm_backward,
	.rope = cpu_rope,
	.attention_forward = cpu_attention_forward,
	.attention_backward = cpu_attention_backward,
	.attention_cached = cpu_attention_cached,
	.swiglu_forward = cpu_swiglu_forward,
	.swiglu_backward = cpu_swiglu_backward,
	.add_inplace = cpu_add_inplace,
	.xent_forward_backward = cpu_xent_forward_backward,
	.sumsq = cpu_sumsq,
	.scale = cpu_scale,
	.adamw_step = cpu_adamw_step,
	.sgd_step = cpu_sgd_step,
	.adamw8_step = cpu_adamw8_step,
	.sgd8_step = cpu_sgd8_step,
};

const struct st_ops *ops_cpu(void)
{
	return &cpu_table;
}
