// The realistic model shapes of issue 12's GPU benchmark (cairn_hip_model_bench) and of the
// model test at those widths (hip_model_shapes_test.cc): random checkpoints with the widths of a
// Qwen3.5-9B-like dense model and of a Qwen3-Next-80B-A3B-like MoE model.

#ifndef CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_HIP_HIP_MODEL_SHAPES_H_
#define CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_HIP_HIP_MODEL_SHAPES_H_

#include "services/infer/models/random_checkpoint_writer.h"

namespace cairn::infer::testing {

// What both shapes share: 16 q heads of 256 in the full-attention layers (every fourth), Gated
// DeltaNet layers of 16 k / 32 v heads of 128, a 256K context.
inline RandomCheckpointOptions HybridModelShape(const char* model_type, int layers, int kv_heads) {
  RandomCheckpointOptions o;
  o.model_type = model_type;
  o.num_layers = layers;
  o.num_heads = 16;
  o.num_kv_heads = kv_heads;
  o.head_dim = 256;
  o.linear_k_heads = 16;
  o.linear_v_heads = 32;
  o.linear_k_dim = 128;
  o.linear_v_dim = 128;
  o.max_position_embeddings = 262144;
  return o;
}

// Qwen3.5-9B-like: hidden 4096, 4 kv heads, MLP 12288, vocabulary 248320, untied.
inline RandomCheckpointOptions DenseModelShape(int layers) {
  RandomCheckpointOptions o = HybridModelShape("qwen3_5_text", layers, 4);
  o.vocab_size = 248320;
  o.hidden_size = 4096;
  o.intermediate_size = 12288;
  return o;
}

// Qwen3-Next-80B-A3B-like: hidden 2048, 2 kv heads, 512 experts of 512 (top 10) plus a shared
// expert of 512, vocabulary 151936; 48 layers in the real model, fewer where the weights must fit.
inline RandomCheckpointOptions MoeModelShape(int layers) {
  RandomCheckpointOptions o = HybridModelShape("qwen3_5_moe_text", layers, 2);
  o.vocab_size = 151936;
  o.hidden_size = 2048;
  o.num_experts = 512;
  o.top_k = 10;
  o.moe_intermediate_size = 512;
  o.shared_intermediate_size = 512;
  return o;
}

}  // namespace cairn::infer::testing

#endif  // CAIRN_TESTS_UNIT_SERVICES_INFER_KERNELS_HIP_HIP_MODEL_SHAPES_H_
