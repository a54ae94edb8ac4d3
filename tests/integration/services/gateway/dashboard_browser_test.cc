// The dashboard renders in headless Chromium (Debian's package) with live data: real
// cairn-cache and cairn-infer processes behind the gateway, a few requests so that the cache
// holds checkpoints on two branches, then the page is loaded with its script run. The test
// finds the budget bars (with non-zero shared rows and private state) and the checkpoint tree
// in the rendered DOM, and checks that the screenshot is a real picture, not a blank page.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/integration/services/gateway/gateway_harness.h"
#include "tests/integration/services/gateway/http_test_client.h"
#include "tests/integration/services/gateway/live_daemons.h"

namespace cairn::gateway::testing {
namespace {

// $CAIRN_CHROMIUM, else chromium or chromium-browser on the PATH; "" when none.
std::string FindChromium() {
  if (const char* env = std::getenv("CAIRN_CHROMIUM"); env != nullptr && *env != '\0') return env;
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "", ':')) {
    for (const char* name : {"chromium", "chromium-browser"}) {
      const std::string candidate = absl::StrCat(dir, "/", name);
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
  }
  return "";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs headless Chromium on `url` with `args`, its output to `out`; bounded by timeout(1).
int RunChromium(const std::string& chromium, const std::string& dir, const std::string& args,
                const std::string& url, const std::string& out) {
  const std::string command = absl::StrCat(
      "timeout 120 ", chromium,
      " --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run"
      " --disable-extensions --disable-background-networking --user-data-dir=",
      dir, "/chromium-profile ", args, " '", url, "' > ", out, " 2>> ", dir, "/chromium.log");
  return std::system(command.c_str());
}

// Returns the value of every attribute `name="..."` in `html`.
std::vector<std::string> AttributeValues(const std::string& html, const std::string& name) {
  std::vector<std::string> out;
  const std::string key = name + "=\"";
  for (size_t at = html.find(key); at != std::string::npos; at = html.find(key, at + 1)) {
    const size_t start = at + key.size();
    out.push_back(html.substr(start, html.find('"', start) - start));
  }
  return out;
}

// A completion request on token ids (the test model has no tokenizer).
std::string Completion(const std::vector<int>& prompt) {
  return absl::StrCat("{\"prompt\":[", absl::StrJoin(prompt, ","),
                      "],\"max_tokens\":4,\"temperature\":0,\"ignore_eos\":true}");
}

std::vector<int> Tokens(int n, int seed) {
  std::vector<int> out;
  for (int i = 0; i < n; ++i) out.push_back(1 + (i * 37 + seed * 101) % 1000);
  return out;
}

TEST(DashboardBrowserTest, RendersBudgetBarsAndTheTreeFromLiveDaemons) {
  const std::string chromium = FindChromium();
  if (chromium.empty()) {
    GTEST_SKIP() << "headless Chromium not found: install Debian's chromium package "
                    "(tools/bootstrap --optional) or set CAIRN_CHROMIUM";
  }
  LiveDaemonsOptions daemon_options;
  daemon_options.slots = 2;
  absl::StatusOr<std::unique_ptr<LiveDaemons>> daemons = LiveDaemons::Start(daemon_options);
  ASSERT_TRUE(daemons.ok()) << daemons.status();
  const std::string dir = (*daemons)->dir();
  HarnessOptions options;
  options.infer_address = (*daemons)->infer_address();
  options.cache_address = (*daemons)->cache_address();
  GatewayHarness h(options);
  HttpTestClient client(h.port(), absl::Seconds(60));
  // One conversation, its next turn, and a second conversation that shares its first 300
  // tokens: checkpoints on two branches of the tree.
  std::vector<int> first = Tokens(600, 1);
  std::vector<int> next = first;
  for (int t : Tokens(120, 2)) next.push_back(t);
  std::vector<int> branch(first.begin(), first.begin() + 300);
  for (int t : Tokens(300, 3)) branch.push_back(t);
  for (const std::vector<int>& prompt : {first, next, branch}) {
    HttpResult r = client.Post("/v1/completions", Completion(prompt));
    ASSERT_EQ(r.status, 200) << r.body;
  }
  nlohmann::json state;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  do {
    state = client.Get("/dashboard/state.json").json();
  } while ((!state["cache"].is_object() || !state["cache"]["up"].get<bool>() ||
            state["cache"]["tree"]["nodes"].size() < 3) &&
           absl::Now() < deadline);
  ASSERT_GE(state["cache"]["tree"]["nodes"].size(), 3u) << state.dump();
  ASSERT_GT(state["cache"]["ram"]["shared_rows"].get<uint64_t>(), 0u) << state.dump();
  // /metrics carries the same numbers, from the daemons' status calls.
  const std::string metrics = client.Get("/metrics").body;
  EXPECT_TRUE(absl::StrContains(metrics, "cairn_cache_up 1\n")) << metrics;
  const std::string rows_line = "cairn_cache_bytes{tier=\"ram\",kind=\"shared_rows\"} ";
  const size_t rows_at = metrics.find(rows_line);
  ASSERT_NE(rows_at, std::string::npos) << metrics;
  EXPECT_NE(metrics.substr(rows_at + rows_line.size(), 2), "0\n") << metrics;
  EXPECT_TRUE(absl::StrContains(metrics, "cairn_cache_hits_total{tier=\"ram\"}")) << metrics;
  EXPECT_TRUE(absl::StrContains(metrics, "cairn_infer_slots_busy{daemon=")) << metrics;
  const std::string url = absl::StrCat("http://127.0.0.1:", h.port(), "/");

  ASSERT_EQ(
      RunChromium(chromium, dir, "--virtual-time-budget=5000 --dump-dom", url, dir + "/dom.html"),
      0)
      << ReadFile(dir + "/chromium.log");
  ASSERT_EQ(RunChromium(chromium, dir,
                        "--virtual-time-budget=5000 --window-size=1280,1100 --hide-scrollbars "
                        "--screenshot=" +
                            dir + "/dashboard.png",
                        url, "/dev/null"),
            0)
      << ReadFile(dir + "/chromium.log");
  ASSERT_EQ(RunChromium(chromium, dir, "--window-size=1280,1100 --screenshot=" + dir + "/blank.png",
                        "data:text/html,<html></html>", "/dev/null"),
            0);

  const std::string dom = ReadFile(dir + "/dom.html");
  EXPECT_TRUE(absl::StrContains(dom, "data-loaded=\"true\"")) << dom;
  EXPECT_TRUE(absl::StrContains(dom, "id=\"budget-bar-ram\"")) << dom;
  // The bar's segments carry their byte counts: rows and private state are both there.
  const std::vector<std::string> kinds = AttributeValues(dom, "data-kind");
  const std::vector<std::string> bytes = AttributeValues(dom, "data-bytes");
  ASSERT_EQ(kinds.size(), bytes.size());
  uint64_t rows = 0;
  uint64_t private_state = 0;
  for (size_t i = 0; i < kinds.size(); ++i) {
    if (kinds[i] == "shared_rows") rows += std::stoull(bytes[i]);
    if (kinds[i] == "private_state") private_state += std::stoull(bytes[i]);
  }
  EXPECT_GT(rows, 0u) << dom;
  EXPECT_GT(private_state, 0u) << dom;
  EXPECT_TRUE(absl::StrContains(dom, "id=\"tree-svg\"")) << dom;
  const std::vector<std::string> tiers = AttributeValues(dom, "data-tier");
  EXPECT_GE(tiers.size(), 3u) << dom;  // One per tree node.
  EXPECT_TRUE(std::find(tiers.begin(), tiers.end(), "ram") != tiers.end() ||
              std::find(tiers.begin(), tiers.end(), "live") != tiers.end())
      << dom;
  EXPECT_TRUE(absl::StrContains(dom, "id=\"slots-table\"")) << dom;
  EXPECT_TRUE(absl::StrContains(dom, "id=\"ttft-table\"")) << dom;
  EXPECT_TRUE(absl::StrContains(dom, "id=\"events-table\"")) << dom;

  const std::string png = ReadFile(dir + "/dashboard.png");
  const std::string blank = ReadFile(dir + "/blank.png");
  ASSERT_GE(png.size(), 24u);
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  auto be32 = [&](size_t at) {
    return (uint32_t(uint8_t(png[at])) << 24) | (uint32_t(uint8_t(png[at + 1])) << 16) |
           (uint32_t(uint8_t(png[at + 2])) << 8) | uint32_t(uint8_t(png[at + 3]));
  };
  EXPECT_EQ(be32(16), 1280u);  // IHDR width.
  EXPECT_GT(be32(20), 0u);
  // A page of text, bars and a tree compresses far worse than an empty one.
  EXPECT_GT(png.size(), 4 * std::max<size_t>(blank.size(), 1))
      << png.size() << " vs " << blank.size();
  EXPECT_GT(png.size(), 20000u);
  if (const char* artifacts = std::getenv("CAIRN_TEST_ARTIFACTS"); artifacts != nullptr) {
    std::error_code ec;
    std::filesystem::copy_file(dir + "/dashboard.png", std::string(artifacts) + "/dashboard.png",
                               std::filesystem::copy_options::overwrite_existing, ec);
  }
  std::cout << "dashboard screenshot: " << png.size() << " bytes (blank page " << blank.size()
            << ")\n";
}

}  // namespace
}  // namespace cairn::gateway::testing
