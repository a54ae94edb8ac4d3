#ifndef CAIRN_TESTS_INTEGRATION_SERVICES_INFER_INFER_TEXT_FIXTURE_H_
#define CAIRN_TESTS_INTEGRATION_SERVICES_INFER_INFER_TEXT_FIXTURE_H_

#include <filesystem>
#include <memory>
#include <string>
#include <system_error>

#include "absl/time/time.h"
#include "common/grpc/client.h"
#include "gtest/gtest.h"
#include "tests/integration/services/infer/infer_harness.h"
#include "tests/unit/services/infer/text/text_test_data.h"

// Fixtures of the daemon tests that serve text: a random model with the real Qwen3 tokenizer and
// chat template, or the demo model with its own.
namespace cairn::infer::testing {

// Text and chat prompts through the real Qwen3 tokenizer and chat template.
class InferDaemonTextTest : public ::testing::Test {
 protected:
  void SetUp() override { StartServer("dense", "m-text"); }

  // Serves a model of `preset` with the real tokenizer, made in the folder `name`; with
  // `chat_template` (a file) that template instead of the folder's own.
  void StartServer(const std::string& preset, const std::string& name,
                   const std::string& chat_template = "") {
    CAIRN_REQUIRE_DOWNLOADED(text::testing::Qwen3ModelDir() + "/tokenizer.json");
    absl::StatusOr<std::string> dir = MakeModelFolder(preset, true, name);
    ASSERT_TRUE(dir.ok()) << dir.status();
    if (!chat_template.empty()) {
      std::error_code ec;
      std::filesystem::copy_file(chat_template, std::filesystem::path(*dir) / "chat_template.jinja",
                                 std::filesystem::copy_options::overwrite_existing, ec);
      ASSERT_FALSE(ec) << ec.message();
    }
    InferServerOptions o;
    o.model_dir = *dir;
    absl::StatusOr<std::unique_ptr<InferServer>> s = InferServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    stub_ = server_->NewStub();
  }
  // Renders `chat` with the daemon's ApplyTemplate.
  grpc::Status Render(const v1::ChatPrompt& chat, v1::ApplyTemplateResponse* rendered) {
    auto ctx = NewClientContext(absl::Seconds(10));
    v1::ApplyTemplateRequest at;
    *at.mutable_chat() = chat;
    return stub_->ApplyTemplate(ctx.get(), at, rendered);
  }

  std::unique_ptr<InferServer> server_;
  std::unique_ptr<v1::InferService::Stub> stub_;
};

// The demo model (cairn-make-model --preset demo): its own chat template with tools and
// thinking, served with the real tokenizer.
class InferDaemonDemoModelTest : public InferDaemonTextTest {
 protected:
  void SetUp() override { StartServer("demo", "m-demo"); }

  // A user's question with one tool, list_files, after `system` if not empty; output parsed.
  static v1::GenerateRequest ListFilesRequest(const std::string& system = "") {
    v1::GenerateRequest req;
    if (!system.empty()) {
      v1::ChatMessage* m = req.mutable_chat()->add_messages();
      m->set_role("system");
      m->set_content(system);
    }
    v1::ChatMessage* user = req.mutable_chat()->add_messages();
    user->set_role("user");
    user->set_content("List the files.");
    req.mutable_chat()->add_tools()->set_json(
        R"({"type": "function", "function": {"name": "list_files", "description": "Lists files.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}})");
    req.mutable_sampling()->set_ignore_eos(true);
    req.set_parse_output(true);
    return req;
  }
};

}  // namespace cairn::infer::testing

#endif  // CAIRN_TESTS_INTEGRATION_SERVICES_INFER_INFER_TEXT_FIXTURE_H_
