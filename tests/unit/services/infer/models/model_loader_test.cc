#include "services/infer/models/model_loader.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/status/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/infer/engine/generation.h"
#include "services/infer/models/model_config.h"
#include "services/infer/models/qwen3_hybrid/qwen3_hybrid_model.h"
#include "services/infer/models/random_checkpoint_presets.h"
#include "services/infer/models/random_checkpoint_writer.h"
#include "services/infer/models/safetensors.h"
#include "services/infer/models/weights_digest.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/services/infer/models/model_test_util.h"

namespace cairn::infer {
namespace {

namespace fs = std::filesystem;
using ::cairn::testing::StatusIs;
using ::testing::HasSubstr;

// A private copy of preset `name` that a test may damage.
std::string CopyOfPreset(const std::string& name, const std::string& tag) {
  absl::StatusOr<std::string> src = testing::PresetDir(name);
  EXPECT_TRUE(src.ok()) << src.status();
  const std::string dst = (fs::path(testing::ScratchDir()) / ("copy-" + tag)).string();
  fs::remove_all(dst);
  fs::copy(*src, dst);
  return dst;
}

void EditConfig(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  std::ifstream in(fs::path(dir) / "config.json");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str());
  edit(j);
  std::ofstream(fs::path(dir) / "config.json", std::ios::trunc) << j.dump();
}

std::vector<float> LastLogits(Model& model, const std::vector<int32_t>& tokens) {
  absl::StatusOr<std::unique_ptr<SlotState>> slot = SlotState::Create(model.state_layout(), 256);
  EXPECT_TRUE(slot.ok());
  absl::StatusOr<std::vector<float>> logits =
      Prefill(model, slot->get(), tokens, UniformPasses(tokens.size(), 0), false);
  EXPECT_TRUE(logits.ok()) << logits.status();
  return logits.ok() ? *logits : std::vector<float>();
}

class ModelLoaderTest : public ::testing::Test {
 protected:
  std::unique_ptr<CpuKernelBackend> backend_ = testing::TestBackend();
};

// The logits of `preset` loaded on `a` and on `b`, for the same 12 tokens in passes of 3 (the
// row kernels), and the two models' infos.
struct TwoRuns {
  std::vector<float> a, b;
  ModelInfo info_a, info_b;
};
absl::StatusOr<TwoRuns> RunOnBoth(const std::string& preset, KernelBackend* a, KernelBackend* b) {
  TwoRuns out;
  for (KernelBackend* backend : {a, b}) {
    ASSIGN_OR_RETURN(std::unique_ptr<Model> model, testing::LoadPreset(preset, backend));
    ASSIGN_OR_RETURN(std::unique_ptr<SlotState> slot, SlotState::Create(model->state_layout(), 64));
    const std::vector<int32_t> tokens = testing::RandomTokens(12, model->info().vocab_size, 3);
    ASSIGN_OR_RETURN(std::vector<float> logits,
                     Prefill(*model, slot.get(), tokens, UniformPasses(12, 3), true));
    (backend == a ? out.a : out.b) = std::move(logits);
    (backend == a ? out.info_a : out.info_b) = model->info();
  }
  return out;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST_F(ModelLoaderTest, WeightsStayInTheFileTypeAndEveryIsaGivesTheSameBits) {
  absl::StatusOr<std::unique_ptr<CpuKernelBackend>> portable =
      CpuKernelBackend::Create({.threads = 2, .isa = "portable"});
  ASSERT_TRUE(portable.ok()) << portable.status();
  for (const std::string preset : {"dense", "next", "moe", "qwen3"}) {
    absl::StatusOr<TwoRuns> r = RunOnBoth(preset, backend_.get(), portable->get());
    ASSERT_TRUE(r.ok()) << r.status();

    // bf16 checkpoints: matrices at two bytes a parameter, vectors (norms, biases) at four.
    EXPECT_LT(r->info_a.weight_bytes, 3 * r->info_a.num_parameters) << preset;
    EXPECT_GE(r->info_a.weight_bytes, 2 * r->info_a.num_parameters) << preset;
    EXPECT_TRUE(SameBits(r->a, r->b)) << preset;
  }
}

TEST_F(ModelLoaderTest, ABackendWithoutTypedWeightsGetsFp32CopiesAndTheSameBits) {
  absl::StatusOr<std::unique_ptr<CpuKernelBackend>> fp32 =
      CpuKernelBackend::Create({.threads = 2, .typed_weights = false});
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  for (const std::string preset : {"dense", "next", "moe", "qwen3"}) {
    absl::StatusOr<TwoRuns> r = RunOnBoth(preset, backend_.get(), fp32->get());
    ASSERT_TRUE(r.ok()) << r.status();

    EXPECT_EQ(r->info_b.weight_bytes, 4 * r->info_b.num_parameters) << preset;
    EXPECT_EQ(r->info_b.num_parameters, r->info_a.num_parameters) << preset;
    EXPECT_TRUE(SameBits(r->a, r->b)) << preset;
  }
}

TEST_F(ModelLoaderTest, RowTilePackedWeightsGiveTheBitsOfTheMappedRows) {
  // backend_ packs bf16 matrices into row tiles at load time (the default); this one reads them
  // row-major where the checkpoint maps them.
  absl::StatusOr<std::unique_ptr<CpuKernelBackend>> rows =
      CpuKernelBackend::Create({.threads = 2, .row_tiles = false});
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_TRUE(backend_->TakesRowTiles(WeightType::kBF16));
  for (const std::string preset : {"dense", "next", "moe", "qwen3"}) {
    absl::StatusOr<TwoRuns> r = RunOnBoth(preset, backend_.get(), rows->get());
    ASSERT_TRUE(r.ok()) << r.status();

    EXPECT_EQ(r->info_a.weight_bytes, r->info_b.weight_bytes) << preset;
    EXPECT_TRUE(SameBits(r->a, r->b)) << preset;

    // A pass of 40 tokens: the GEMM path, which widens row tiles before its sgemm calls.
    std::vector<float> logits[2];
    for (int i = 0; i < 2; ++i) {
      KernelBackend* backend = i == 0 ? static_cast<KernelBackend*>(backend_.get()) : rows->get();
      absl::StatusOr<std::unique_ptr<Model>> model = testing::LoadPreset(preset, backend);
      ASSERT_TRUE(model.ok()) << model.status();
      absl::StatusOr<std::unique_ptr<SlotState>> slot =
          SlotState::Create((*model)->state_layout(), 64);
      ASSERT_TRUE(slot.ok()) << slot.status();
      const std::vector<int32_t> tokens = testing::RandomTokens(40, (*model)->info().vocab_size, 5);
      absl::StatusOr<std::vector<float>> l =
          Prefill(**model, slot->get(), tokens, UniformPasses(40, 40), true);
      ASSERT_TRUE(l.ok()) << l.status();
      logits[i] = *std::move(l);
    }
    EXPECT_TRUE(SameBits(logits[0], logits[1])) << preset << " (one pass of 40)";
  }
}

TEST_F(ModelLoaderTest, LoadsEveryPresetWithItsStateLayout) {
  for (const char* preset : {"dense", "dense-wrapped", "next", "moe", "moe-wrapped", "qwen3"}) {
    absl::StatusOr<std::unique_ptr<Model>> model = testing::LoadPreset(preset, backend_.get());
    ASSERT_TRUE(model.ok()) << preset << ": " << model.status();
    absl::StatusOr<RandomCheckpointOptions> o = RandomCheckpointPreset(preset);
    ASSERT_TRUE(o.ok());
    // Plain Qwen3 has only full-attention layers.
    const int full_layers =
        o->model_type == "qwen3" ? o->num_layers : o->num_layers / o->full_attention_interval;
    const int gdn_layers = o->num_layers - full_layers;
    int rows = 0;
    int priv = 0;
    for (const StateComponent& c : (*model)->state_layout().components) {
      (c.kind == ComponentKind::kRows ? rows : priv)++;
    }
    EXPECT_EQ(rows, 2 * full_layers) << preset;
    EXPECT_EQ(priv, 2 * gdn_layers) << preset;
    EXPECT_EQ((*model)->state_layout().row_bytes(),
              2 * full_layers * o->num_kv_heads * o->head_dim * 4);
    EXPECT_EQ((*model)->info().vocab_size, o->vocab_size);
  }
}

TEST_F(ModelLoaderTest, PlainQwen3HasRowsOnlyState) {
  absl::StatusOr<std::unique_ptr<Model>> model = testing::LoadPreset("qwen3", backend_.get());
  ASSERT_TRUE(model.ok()) << model.status();
  const StateLayout& layout = (*model)->state_layout();

  EXPECT_EQ(layout.private_bytes(), 0);
  EXPECT_GT(layout.row_bytes(), 0);
  EXPECT_EQ((*model)->info().architecture, "qwen3");
}

TEST_F(ModelLoaderTest, WrapperAndTextOnlyFormsGiveIdenticalLogits) {
  const std::vector<int32_t> tokens = testing::RandomTokens(70, 1024, 3);
  for (auto [text, wrapped] : {std::pair{"dense", "dense-wrapped"}, {"moe", "moe-wrapped"}}) {
    absl::StatusOr<std::unique_ptr<Model>> a = testing::LoadPreset(text, backend_.get());
    absl::StatusOr<std::unique_ptr<Model>> b = testing::LoadPreset(wrapped, backend_.get());
    ASSERT_TRUE(a.ok() && b.ok());

    const std::vector<float> la = LastLogits(**a, tokens);
    const std::vector<float> lb = LastLogits(**b, tokens);

    ASSERT_EQ(la.size(), lb.size());
    EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)), 0) << text;
  }
}

TEST_F(ModelLoaderTest, ShardingDoesNotChangeTheModel) {
  absl::StatusOr<RandomCheckpointOptions> o = RandomCheckpointPreset("moe");
  ASSERT_TRUE(o.ok());
  o->shards = 1;
  const std::string single = (fs::path(testing::ScratchDir()) / "single").string();
  CAIRN_ASSERT_OK(WriteRandomCheckpoint(single, *o));
  absl::StatusOr<std::unique_ptr<Model>> sharded = testing::LoadPreset("moe", backend_.get());
  absl::StatusOr<std::unique_ptr<Model>> one = LoadModel(single, backend_.get(), {});
  ASSERT_TRUE(sharded.ok() && one.ok());
  const std::vector<int32_t> tokens = testing::RandomTokens(20, 1024, 4);

  EXPECT_EQ(LastLogits(**sharded, tokens), LastLogits(**one, tokens));
  EXPECT_TRUE(fs::exists(fs::path(*testing::PresetDir("moe")) / "model.safetensors.index.json"));
}

// A model built in memory from RandomCheckpointConfig / RandomCheckpointTensors and a store of
// views (as the GPU benchmark builds its large models) equals the one written to disk.
TEST_F(ModelLoaderTest, AStoreInMemoryFromTheRandomShapesGivesTheWrittenModel) {
  for (const std::string preset : {"dense", "moe-wrapped", "qwen3"}) {
    SCOPED_TRACE(preset);
    absl::StatusOr<RandomCheckpointOptions> options = RandomCheckpointPreset(preset);
    ASSERT_TRUE(options.ok());
    absl::StatusOr<std::string> dir = testing::PresetDir(preset);
    ASSERT_TRUE(dir.ok()) << dir.status();
    absl::StatusOr<std::unique_ptr<TensorStore>> disk = TensorStore::Open(*dir);
    ASSERT_TRUE(disk.ok()) << disk.status();
    absl::StatusOr<std::vector<RandomTensorShape>> shapes = RandomCheckpointTensors(*options);
    ASSERT_TRUE(shapes.ok()) << shapes.status();
    ASSERT_EQ(shapes->size(), (*disk)->tensors().size());
    std::vector<TensorView> views;
    for (const RandomTensorShape& t : *shapes) {
      const TensorView* on_disk = (*disk)->Find(t.name);
      ASSERT_NE(on_disk, nullptr) << t.name;
      EXPECT_EQ(on_disk->shape, t.shape) << t.name;
      views.push_back(*on_disk);
    }
    absl::StatusOr<std::unique_ptr<TensorStore>> memory = TensorStore::FromViews(views);
    ASSERT_TRUE(memory.ok()) << memory.status();
    absl::StatusOr<std::string> config_text = RandomCheckpointConfig(*options);
    ASSERT_TRUE(config_text.ok());
    std::ifstream in(fs::path(*dir) / "config.json");
    std::stringstream written;
    written << in.rdbuf();
    EXPECT_EQ(*config_text, written.str());
    absl::StatusOr<HybridConfig> config = ParseHybridConfig(*config_text);
    ASSERT_TRUE(config.ok()) << config.status();
    absl::StatusOr<std::unique_ptr<Model>> from_memory =
        CreateQwen3HybridModel(*config, *std::move(memory), 0, backend_.get(), {});
    ASSERT_TRUE(from_memory.ok()) << from_memory.status();
    absl::StatusOr<std::unique_ptr<Model>> from_disk = testing::LoadPreset(preset, backend_.get());
    ASSERT_TRUE(from_disk.ok()) << from_disk.status();
    const std::vector<int32_t> tokens =
        testing::RandomTokens(12, (*from_disk)->info().vocab_size, 5);
    const std::vector<float> a = LastLogits(**from_memory, tokens);
    const std::vector<float> b = LastLogits(**from_disk, tokens);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  }
}

TEST_F(ModelLoaderTest, MissingTensorIsNamed) {
  const std::string dir = CopyOfPreset("dense", "untied");
  EditConfig(dir, [](nlohmann::json& j) { j["tie_word_embeddings"] = false; });

  absl::StatusOr<std::unique_ptr<Model>> model = LoadModel(dir, backend_.get(), {});

  EXPECT_THAT(model.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(model.status().message(), HasSubstr("lm_head.weight"));
}

// transformers 5's tie_weights leaves a stored lm_head.weight that differs from the embedding in
// place even when the config says tied: a tied config over an untied checkpoint gives the untied
// model's logits, not the embedding's.
TEST_F(ModelLoaderTest, AStoredLmHeadIsUsedEvenWhenTheConfigSaysTied) {
  absl::StatusOr<RandomCheckpointOptions> options = RandomCheckpointPreset("dense");
  ASSERT_TRUE(options.ok()) << options.status();
  options->tie_word_embeddings = false;
  const std::string untied = (fs::path(testing::ScratchDir()) / "stored-head-untied").string();
  const std::string tied = (fs::path(testing::ScratchDir()) / "stored-head-tied").string();
  fs::remove_all(untied);
  fs::remove_all(tied);
  ASSERT_TRUE(WriteRandomCheckpoint(untied, *options).ok());
  fs::copy(untied, tied);
  EditConfig(tied, [](nlohmann::json& j) { j["tie_word_embeddings"] = true; });

  absl::StatusOr<std::unique_ptr<Model>> a = LoadModel(untied, backend_.get(), {});
  absl::StatusOr<std::unique_ptr<Model>> b = LoadModel(tied, backend_.get(), {});

  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  const std::vector<int32_t> tokens = testing::RandomTokens(8, (*a)->info().vocab_size, 7);
  EXPECT_TRUE(SameBits(LastLogits(**a, tokens), LastLogits(**b, tokens)));
  EXPECT_EQ((*a)->info().num_parameters, (*b)->info().num_parameters);
}

// A wrapper without lm_head.weight whose top level alone says tied (its ForConditionalGeneration
// ties it) loads with the embedding as its head; one that says untied at both levels is refused,
// naming the tensor.
TEST_F(ModelLoaderTest, AWrapperTiesByEitherLevel) {
  const std::string top = CopyOfPreset("dense-wrapped", "wrapper-tie-top");
  EditConfig(top, [](nlohmann::json& j) {
    j["tie_word_embeddings"] = true;
    j["text_config"].erase("tie_word_embeddings");
  });
  const std::string neither = CopyOfPreset("dense-wrapped", "wrapper-tie-neither");
  EditConfig(neither, [](nlohmann::json& j) {
    j["tie_word_embeddings"] = false;
    j["text_config"]["tie_word_embeddings"] = false;
  });

  absl::StatusOr<std::unique_ptr<Model>> tied = LoadModel(top, backend_.get(), {});
  absl::StatusOr<std::unique_ptr<Model>> refused = LoadModel(neither, backend_.get(), {});

  EXPECT_TRUE(tied.ok()) << tied.status();
  EXPECT_THAT(refused.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(refused.status().message(), HasSubstr("lm_head.weight"));
}

// A checkpoint may carry tensors of dtypes the model never reads (an int64 buffer, fp8 parts
// Cairn does not load): it loads, with the model of the same checkpoint without them.
TEST_F(ModelLoaderTest, TensorsOfOtherDtypesThatAreNotReadAreIgnored) {
  const std::string plain = CopyOfPreset("dense", "other-dtypes-plain");
  const std::string extra = CopyOfPreset("dense", "other-dtypes-extra");
  // Without an index every *.safetensors file of the folder is opened, the new one too.
  ASSERT_FALSE(fs::exists(fs::path(extra) / "model.safetensors.index.json"));
  {
    const std::string header =
        R"({"model.position_ids":{"dtype":"I64","shape":[4],"data_offsets":[0,32]},)"
        R"("mtp.fc.weight":{"dtype":"F8_E4M3","shape":[2,2],"data_offsets":[32,36]}})";
    std::ofstream out(fs::path(extra) / "extra.safetensors", std::ios::binary);
    const uint64_t len = header.size();
    out.write(reinterpret_cast<const char*>(&len), 8);
    out << header << std::string(36, '\0');
  }

  absl::StatusOr<std::unique_ptr<Model>> a = LoadModel(plain, backend_.get(), {});
  absl::StatusOr<std::unique_ptr<Model>> b = LoadModel(extra, backend_.get(), {});

  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  const std::vector<int32_t> tokens = testing::RandomTokens(8, (*a)->info().vocab_size, 7);
  EXPECT_TRUE(SameBits(LastLogits(**a, tokens), LastLogits(**b, tokens)));
}

TEST_F(ModelLoaderTest, MisshapenTensorIsNamed) {
  const std::string dir = CopyOfPreset("dense", "wide");
  EditConfig(dir, [](nlohmann::json& j) { j["intermediate_size"] = 130; });

  absl::StatusOr<std::unique_ptr<Model>> model = LoadModel(dir, backend_.get(), {});

  EXPECT_THAT(model.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(model.status().message(), HasSubstr("model.layers.0.mlp.gate_proj.weight"));
  EXPECT_THAT(model.status().message(), HasSubstr("[130, 64]"));
}

TEST_F(ModelLoaderTest, UnknownArchitectureIsNotFound) {
  const std::string dir = CopyOfPreset("dense", "llama");
  EditConfig(dir, [](nlohmann::json& j) { j["model_type"] = "llama"; });

  EXPECT_THAT(LoadModel(dir, backend_.get(), {}).status(), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(ModelLoaderTest, TruncatedShardIsNamed) {
  const std::string dir = CopyOfPreset("next", "truncated");
  const fs::path shard = fs::path(dir) / "model-00002-of-00002.safetensors";
  fs::resize_file(shard, fs::file_size(shard) - 100);

  absl::StatusOr<std::unique_ptr<Model>> model = LoadModel(dir, backend_.get(), {});

  EXPECT_THAT(model.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(model.status().message(), HasSubstr("model-00002-of-00002.safetensors"));
  EXPECT_THAT(model.status().message(), HasSubstr("truncated"));
}

TEST_F(ModelLoaderTest, MissingFolderIsNotFound) {
  EXPECT_THAT(LoadModel("/nonexistent/cairn-model", backend_.get(), {}).status(),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(ModelLoaderTest, DigestIsStableAndDependsOnTheWeights) {
  absl::StatusOr<std::unique_ptr<Model>> a = testing::LoadPreset("dense", backend_.get());
  absl::StatusOr<std::unique_ptr<Model>> b = testing::LoadPreset("dense", backend_.get());
  absl::StatusOr<RandomCheckpointOptions> o = RandomCheckpointPreset("dense");
  ASSERT_TRUE(a.ok() && b.ok() && o.ok());
  o->seed += 1;
  const std::string other = (fs::path(testing::ScratchDir()) / "reseeded").string();
  CAIRN_ASSERT_OK(WriteRandomCheckpoint(other, *o));
  absl::StatusOr<std::unique_ptr<Model>> c = LoadModel(other, backend_.get(), {});
  ASSERT_TRUE(c.ok());

  EXPECT_EQ((*a)->info().weights_digest, (*b)->info().weights_digest);
  EXPECT_NE((*a)->info().weights_digest, (*c)->info().weights_digest);
}

TEST_F(ModelLoaderTest, DigestCacheIsKeyedBySizeAndMtime) {
  const std::string dir = CopyOfPreset("dense", "digest");
  const std::string file = (fs::path(dir) / "model.safetensors").string();
  const std::string cache = (fs::path(dir) / "digests.json").string();
  absl::StatusOr<uint64_t> uncached = ComputeWeightsDigest({file}, {});
  absl::StatusOr<uint64_t> first =
      ComputeWeightsDigest({file}, {.cache_path = cache, .progress = {}});
  ASSERT_TRUE(uncached.ok() && first.ok());
  EXPECT_EQ(*uncached, *first);
  // Plant a wrong file digest: a cache hit returns something else.
  std::ifstream in(cache);
  nlohmann::json j = nlohmann::json::parse(in);
  in.close();
  j[fs::absolute(file).string()]["xxh3"] = 12345u;
  std::ofstream(cache, std::ios::trunc) << j.dump();

  absl::StatusOr<uint64_t> hit =
      ComputeWeightsDigest({file}, {.cache_path = cache, .progress = {}});
  fs::last_write_time(file, fs::last_write_time(file) + std::chrono::seconds(5));
  absl::StatusOr<uint64_t> recomputed =
      ComputeWeightsDigest({file}, {.cache_path = cache, .progress = {}});

  ASSERT_TRUE(hit.ok() && recomputed.ok());
  EXPECT_NE(*hit, *first);
  EXPECT_EQ(*recomputed, *first);
}

// A cache entry whose fields have other JSON types (a cache edited by hand) is a miss: the file
// is hashed again, never a crash.
TEST_F(ModelLoaderTest, DigestCacheEntriesOfOtherTypesAreMisses) {
  const std::string dir = CopyOfPreset("dense", "digest-types");
  const std::string file = (fs::path(dir) / "model.safetensors").string();
  const std::string cache = (fs::path(dir) / "digests.json").string();
  absl::StatusOr<uint64_t> uncached = ComputeWeightsDigest({file}, {});
  ASSERT_TRUE(uncached.ok()) << uncached.status();
  const std::string key = fs::absolute(file).string();
  for (const nlohmann::json& entry :
       {nlohmann::json{{"size", "large"}, {"mtime_ns", 1}, {"xxh3", 12345u}},
        nlohmann::json{{"size", fs::file_size(file)}, {"mtime_ns", true}, {"xxh3", 12345u}},
        nlohmann::json{{"size", fs::file_size(file)}, {"mtime_ns", nullptr}, {"xxh3", 12345u}},
        nlohmann::json{{"size", fs::file_size(file)}, {"mtime_ns", 1}, {"xxh3", "ff"}}}) {
    std::ofstream(cache, std::ios::trunc) << nlohmann::json{{key, entry}}.dump();

    absl::StatusOr<uint64_t> digest =
        ComputeWeightsDigest({file}, {.cache_path = cache, .progress = {}});

    ASSERT_TRUE(digest.ok()) << digest.status() << " for " << entry.dump();
    EXPECT_EQ(*digest, *uncached) << entry.dump();
  }
}

// A load reports its progress phase by phase: the weight files read for the digest in bytes
// (the first step 0, the last the files' whole size, never decreasing), then the layers placed
// one by one. A second load, its digests cached, reads no file and reports only the layers.
TEST_F(ModelLoaderTest, ALoadReportsItsProgressPhaseByPhase) {
  const std::string dir = CopyOfPreset("moe", "progress");
  int64_t file_bytes = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".safetensors") file_bytes += static_cast<int64_t>(e.file_size());
  }
  std::ifstream in(fs::path(dir) / "config.json");
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<HybridConfig> config = ParseHybridConfig(text.str());
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_GT(file_bytes, 0);

  struct Step {
    std::string phase;
    int64_t done, total;
    std::string unit;
  };
  std::vector<Step> steps;
  ModelLoadOptions o;
  o.digest.cache_path = (fs::path(dir) / "digests.json").string();
  o.progress = [&steps](const LoadProgressStep& s) {
    steps.push_back({std::string(s.phase), s.done, s.total, std::string(s.unit)});
  };
  const auto check_layers = [&](size_t first) {
    ASSERT_EQ(steps.size() - first, static_cast<size_t>(config->num_layers) + 1);
    for (size_t i = first; i < steps.size(); ++i) {
      EXPECT_EQ(steps[i].phase, "placing the weights");
      EXPECT_EQ(steps[i].unit, "layers");
      EXPECT_EQ(steps[i].done, static_cast<int64_t>(i - first));
      EXPECT_EQ(steps[i].total, config->num_layers);
    }
  };

  CAIRN_ASSERT_OK(LoadModel(dir, backend_.get(), o).status());
  size_t hashed = 0;
  while (hashed < steps.size() && steps[hashed].phase == "hashing the weights") {
    EXPECT_EQ(steps[hashed].unit, "bytes");
    EXPECT_EQ(steps[hashed].total, file_bytes);
    if (hashed > 0) {
      EXPECT_GE(steps[hashed].done, steps[hashed - 1].done);
    }
    ++hashed;
  }
  ASSERT_GE(hashed, 2u);
  EXPECT_EQ(steps.front().done, 0);
  EXPECT_EQ(steps[hashed - 1].done, file_bytes);
  check_layers(hashed);

  steps.clear();
  CAIRN_ASSERT_OK(LoadModel(dir, backend_.get(), o).status());
  check_layers(0);
}

TEST_F(ModelLoaderTest, ForwardRejectsBadTokensAndLeavesTheSlotAlone) {
  absl::StatusOr<std::unique_ptr<Model>> model = testing::LoadPreset("dense", backend_.get());
  ASSERT_TRUE(model.ok());
  absl::StatusOr<std::unique_ptr<SlotState>> slot = SlotState::Create((*model)->state_layout(), 4);
  ASSERT_TRUE(slot.ok());
  const std::vector<int32_t> bad = {1, 1024};
  const std::vector<int32_t> too_many = {1, 2, 3, 4, 5};

  EXPECT_THAT((*model)->Forward(slot->get(), bad, {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT((*model)->Forward(slot->get(), {}, {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT((*model)->Forward(slot->get(), too_many, {}).status(),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ((*slot)->position(), 0);
}

TEST_F(ModelLoaderTest, ForwardRejectsASlotOfAnotherLayout) {
  absl::StatusOr<std::unique_ptr<Model>> dense = testing::LoadPreset("dense", backend_.get());
  absl::StatusOr<std::unique_ptr<Model>> next = testing::LoadPreset("next", backend_.get());
  ASSERT_TRUE(dense.ok() && next.ok());
  absl::StatusOr<std::unique_ptr<SlotState>> slot = SlotState::Create((*next)->state_layout(), 8);
  ASSERT_TRUE(slot.ok());
  const std::vector<int32_t> tokens = {1, 2};

  EXPECT_THAT((*dense)->Forward(slot->get(), tokens, {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace cairn::infer
