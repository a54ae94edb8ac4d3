#include "services/cache/sim/trace.h"

#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace cairn::cache::sim {

using Json = nlohmann::json;

TokenId RandomToken(uint64_t seed, uint64_t index, int64_t vocab_size) {
  uint64_t z = seed + (index + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<TokenId>(z % static_cast<uint64_t>(vocab_size));
}

namespace {

absl::Status LineError(int line, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("trace line ", line, ": ", what));
}

// Reads a non-negative integer field.
absl::StatusOr<int64_t> NonNegative(const Json& value, int line, absl::string_view name,
                                    int64_t max = std::numeric_limits<int64_t>::max()) {
  if (!value.is_number_integer() || (value.is_number_unsigned() &&
                                     value.get<uint64_t>() > static_cast<uint64_t>(max))) {
    return LineError(line, absl::StrCat("'", name, "' must be a non-negative integer"));
  }
  int64_t v = value.get<int64_t>();
  if (v < 0 || v > max) {
    return LineError(line, absl::StrCat("'", name, "' out of range: ", v));
  }
  return v;
}

absl::StatusOr<Segment> ParseSegment(const Json& j, int line, const TraceOptions& options) {
  if (!j.is_object()) return LineError(line, "a segment must be an object");
  Segment s;
  int kinds = 0;
  for (const auto& [key, value] : j.items()) {
    if (key == "text") {
      if (!value.is_string()) return LineError(line, "'text' must be a string");
      s.kind = Segment::Kind::kText;
      s.text = value.get<std::string>();
      ++kinds;
    } else if (key == "ids") {
      if (!value.is_array()) return LineError(line, "'ids' must be an array");
      s.kind = Segment::Kind::kIds;
      for (const Json& id : value) {
        absl::StatusOr<int64_t> v = NonNegative(id, line, "ids", std::numeric_limits<TokenId>::max());
        if (!v.ok()) return v.status();
        s.ids.push_back(static_cast<TokenId>(*v));
      }
      ++kinds;
    } else if (key == "rand") {
      if (!value.is_number_integer() || (!value.is_number_unsigned() && value.get<int64_t>() < 0)) {
        return LineError(line, "'rand' must be a non-negative integer seed");
      }
      s.kind = Segment::Kind::kRand;
      s.seed = value.get<uint64_t>();
      ++kinds;
    } else if (key == "len" || key == "skip") {
      absl::StatusOr<int64_t> v = NonNegative(value, line, key, options.max_request_tokens);
      if (!v.ok()) return v.status();
      (key == "len" ? s.len : s.skip) = *v;
    } else {
      return LineError(line, absl::StrCat("unknown segment field '", key, "'"));
    }
  }
  if (kinds != 1) return LineError(line, "a segment needs exactly one of text, ids, rand");
  bool rand_fields = j.contains("len") || j.contains("skip");
  if (s.kind == Segment::Kind::kRand && !j.contains("len")) {
    return LineError(line, "a rand segment needs 'len'");
  }
  if (s.kind != Segment::Kind::kRand && rand_fields) {
    return LineError(line, "'len' and 'skip' belong to rand segments");
  }
  return s;
}

int64_t SegmentLength(const Segment& s) {
  switch (s.kind) {
    case Segment::Kind::kText:
      return static_cast<int64_t>(s.text.size());
    case Segment::Kind::kIds:
      return static_cast<int64_t>(s.ids.size());
    case Segment::Kind::kRand:
      return s.len;
  }
  return 0;
}

absl::StatusOr<TraceRequest> ParseLine(absl::string_view text, int line,
                                       const TraceOptions& options) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return LineError(line, "not valid JSON");
  if (!j.is_object()) return LineError(line, "a request must be a JSON object");
  TraceRequest r;
  r.line = line;
  bool has_conv = false;
  bool has_segments = false;
  for (const auto& [key, value] : j.items()) {
    if (key == "conv") {
      if (!value.is_string() || value.get<std::string>().empty()) {
        return LineError(line, "'conv' must be a non-empty string");
      }
      r.conv = value.get<std::string>();
      has_conv = true;
    } else if (key == "t") {
      if (!value.is_number() || value.get<double>() < 0) {
        return LineError(line, "'t' must be a non-negative number of seconds");
      }
      r.t = value.get<double>();
    } else if (key == "segments") {
      if (!value.is_array() || value.empty()) {
        return LineError(line, "'segments' must be a non-empty array");
      }
      for (const Json& s : value) {
        absl::StatusOr<Segment> seg = ParseSegment(s, line, options);
        if (!seg.ok()) return seg.status();
        r.segments.push_back(std::move(*seg));
      }
      has_segments = true;
    } else if (key == "stable" || key == "gen") {
      absl::StatusOr<int64_t> v = NonNegative(value, line, key, options.max_request_tokens);
      if (!v.ok()) return v.status();
      (key == "stable" ? r.stable : r.gen) = *v;
    } else {
      return LineError(line, absl::StrCat("unknown field '", key, "'"));
    }
  }
  if (!has_conv) return LineError(line, "missing 'conv'");
  if (!has_segments) return LineError(line, "missing 'segments'");
  int64_t total = 0;
  for (const Segment& s : r.segments) total += SegmentLength(s);
  if (total > options.max_request_tokens) {
    return LineError(line, absl::StrCat("prompt of ", total, " tokens exceeds the limit of ",
                                        options.max_request_tokens));
  }
  if (total == 0) return LineError(line, "empty prompt");
  if (r.stable > total) {
    return LineError(line, absl::StrCat("'stable' ", r.stable, " past the prompt's ", total,
                                        " tokens"));
  }
  return r;
}

}  // namespace

absl::StatusOr<std::vector<TraceRequest>> ParseTrace(absl::string_view text,
                                                     const TraceOptions& options) {
  if (options.vocab_size < 1) return absl::InvalidArgumentError("vocab size must be positive");
  std::vector<TraceRequest> out;
  int line = 0;
  while (!text.empty()) {
    ++line;
    size_t nl = text.find('\n');
    absl::string_view row = text.substr(0, nl);
    text = nl == absl::string_view::npos ? absl::string_view() : text.substr(nl + 1);
    absl::string_view trimmed = absl::StripAsciiWhitespace(row);
    if (trimmed.empty() || trimmed.front() == '#') continue;
    absl::StatusOr<TraceRequest> r = ParseLine(trimmed, line, options);
    if (!r.ok()) return r.status();
    out.push_back(std::move(*r));
  }
  if (out.empty()) return absl::InvalidArgumentError("trace holds no requests");
  return out;
}

absl::StatusOr<std::vector<TraceRequest>> ReadTraceFile(const std::string& path,
                                                        const TraceOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open trace ", path));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("cannot read trace ", path));
  absl::StatusOr<std::vector<TraceRequest>> trace = ParseTrace(buffer.str(), options);
  if (!trace.ok()) {
    return absl::Status(trace.status().code(), absl::StrCat(path, ": ", trace.status().message()));
  }
  return trace;
}

Prompt Materialize(const TraceRequest& request, const TraceOptions& options) {
  Prompt p;
  for (const Segment& s : request.segments) {
    p.segment_starts.push_back(static_cast<int64_t>(p.tokens.size()));
    switch (s.kind) {
      case Segment::Kind::kText:
        for (unsigned char c : s.text) p.tokens.push_back(static_cast<TokenId>(c));
        break;
      case Segment::Kind::kIds:
        p.tokens.insert(p.tokens.end(), s.ids.begin(), s.ids.end());
        break;
      case Segment::Kind::kRand:
        for (int64_t i = 0; i < s.len; ++i) {
          p.tokens.push_back(
              RandomToken(s.seed, static_cast<uint64_t>(s.skip + i), options.vocab_size));
        }
        break;
    }
  }
  return p;
}

std::string FormatTraceLine(const TraceRequest& request) {
  Json j;
  j["conv"] = request.conv;
  j["t"] = request.t;
  Json segments = Json::array();
  for (const Segment& s : request.segments) {
    Json seg;
    switch (s.kind) {
      case Segment::Kind::kText:
        seg["text"] = s.text;
        break;
      case Segment::Kind::kIds:
        seg["ids"] = s.ids;
        break;
      case Segment::Kind::kRand:
        seg["rand"] = s.seed;
        seg["len"] = s.len;
        if (s.skip != 0) seg["skip"] = s.skip;
        break;
    }
    segments.push_back(std::move(seg));
  }
  j["segments"] = std::move(segments);
  if (request.stable >= 0) j["stable"] = request.stable;
  if (request.gen > 0) j["gen"] = request.gen;
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace cairn::cache::sim
