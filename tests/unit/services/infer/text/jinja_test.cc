#include "services/infer/text/jinja.h"

#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/status_matchers.h"

namespace cairn::infer::text::jinja {
namespace {

using ::cairn::testing::StatusIs;

// Renders `source` with the variables of the JSON object `vars`; returns the output or
// "ERROR: <message>".
std::string Render(const std::string& source, const std::string& vars = "{}") {
  absl::StatusOr<std::unique_ptr<Template>> t = Template::Parse(source);
  if (!t.ok()) return "ERROR: " + std::string(t.status().message());
  ValueDict ctx;
  const Value v = Value::FromJson(nlohmann::ordered_json::parse(vars));
  for (const auto& kv : v.dict().items) ctx.Set(kv.first, kv.second);
  absl::StatusOr<std::string> out = (*t)->Render(ctx);
  if (!out.ok()) return "ERROR: " + std::string(out.status().message());
  return *out;
}

TEST(JinjaTest, TrimAndLstripBlocks) {
  EXPECT_EQ(Render("a\n  {% if true %}\n  b\n  {% endif %}\nc"), "a\n  b\nc");
  EXPECT_EQ(Render("x  {%- if true -%}  y  {%- endif %}"), "xy");
  EXPECT_EQ(Render("a\n  {%+ if true %}b{% endif %}"), "a\n  b");
  EXPECT_EQ(Render("{{ 'v' }}\nnext"), "v\nnext");  // trim_blocks: not after }}.
  EXPECT_EQ(Render("a {# note #}\nb"), "a b");      // Comments are trimmed too.
  EXPECT_EQ(Render("end\n"), "end");                // keep_trailing_newline=False.
}

TEST(JinjaTest, ForLoopVariables) {
  EXPECT_EQ(Render("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
                   "{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}",
                   R"({"xs": ["a", "b"]})"),
            "102TrueFalse2|211FalseTrue2|");
  EXPECT_EQ(Render("{% for x in xs %}{{ loop.previtem|default('-') }}{{ x }}"
                   "{{ loop.nextitem|default('-') }} {% endfor %}",
                   R"({"xs": [1, 2, 3]})"),
            "-12 123 23- ");
  EXPECT_EQ(Render("{% for x in xs if x > 1 %}{{ x }}{{ loop.length }}{% else %}none"
                   "{% endfor %}",
                   R"({"xs": [1, 2, 3]})"),
            "2232");
  EXPECT_EQ(Render("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(Render("{% for k, v in d|items %}{{ k }}={{ v }},{% endfor %}",
                   R"({"d": {"b": 1, "a": [true, null]}})"),
            "b=1,a=[True, None],");
  EXPECT_EQ(Render("{% for x in [1,2,3,4] %}{% if x == 2 %}{% continue %}{% endif %}"
                   "{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
            "13");
}

TEST(JinjaTest, LoopScopeDoesNotLeakButNamespacesDo) {
  EXPECT_EQ(Render("{% set a = 1 %}{% for x in [5] %}{% set a = x %}{% endfor %}{{ a }}"), "1");
  EXPECT_EQ(Render("{% set ns = namespace(a=1) %}{% for x in [5] %}{% set ns.a = x %}"
                   "{% endfor %}{{ ns.a }}"),
            "5");
  EXPECT_EQ(Render("{% if true %}{% set a = 2 %}{% endif %}{{ a }}"), "2");
  // Each iteration starts from the enclosing scope again.
  EXPECT_EQ(Render("{% set a = 0 %}{% for x in [1, 2] %}{{ a }}{% set a = x %}{{ a }}|{% endfor %}"
                   "{{ a }}"),
            "01|02|0");
  EXPECT_EQ(Render("{% macro m() %}{% set q = 1 %}{{ q }}{% endmacro %}{{ m() }}{{ q }}"), "1");
  EXPECT_EQ(Render("{{ [1, 2][5] }}|{{ {'a': 1}.b }}|{{ 'abc'[10] }}"), "||");
}

TEST(JinjaTest, MacrosWithDefaultsAndKeywords) {
  EXPECT_EQ(Render("{% macro m(a, b='B', c=none) %}[{{ a }}{{ b }}{{ c }}]{% endmacro %}"
                   "{{ m(1) }}{{ m(1, c=3) }}{{ m('x', 'y')|trim }}"),
            "[1BNone][1B3][xyNone]");
  EXPECT_EQ(Render("{% set g = 'G' %}{% macro m() %}{{ g }}{% endmacro %}{{ m() }}"), "G");
}

TEST(JinjaTest, ExpressionsAndOperators) {
  EXPECT_EQ(Render("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }}"),
            "3 -4 1 2 3.5 1024");
  EXPECT_EQ(Render("{{ 'a' ~ 1 ~ none }} {{ 'ab' * 2 }} {{ [1] + [2] }}"), "a1None abab [1, 2]");
  EXPECT_EQ(Render("{{ 'b' in 'abc' }} {{ 3 not in [1, 2] }} {{ 'k' in {'k': 1} }}"),
            "True True True");
  EXPECT_EQ(Render("{{ 'x' if false else 'y' }}{{ 'z' if false }}"), "y");
  EXPECT_EQ(Render("{{ not 1 == 2 and (1 < 2 or false) }}"), "True");
  EXPECT_EQ(Render("{{ -x|abs }}", R"({"x": 3})"), "3");
}

TEST(JinjaTest, SlicesUseCodePoints) {
  EXPECT_EQ(Render("{{ s[::-1] }} {{ s[1:] }} {{ s[-2:] }} {{ s[0] }}", R"({"s": "h\u00e9llo"})"),
            "oll\xC3\xA9h \xC3\xA9llo lo h");
  EXPECT_EQ(Render("{{ xs[::-1] }} {{ xs[1:3] }} {{ xs[::2] }}", R"({"xs": [1, 2, 3, 4]})"),
            "[4, 3, 2, 1] [2, 3] [1, 3]");
}

TEST(JinjaTest, StringMethods) {
  EXPECT_EQ(Render("{{ s.split('</think>')[-1].lstrip('\\n') }}|{{ s.split('</think>')[0]"
                   ".rstrip('\\n').split('<think>')[-1] }}",
                   R"({"s": "<think>r\n</think>\n\nanswer"})"),
            "answer|r");
  EXPECT_EQ(Render("{{ ' a  b '.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a b c'.split(' ', 1) }}"),
            "['a', 'b'] ['a', 'b', '', 'c'] ['a', 'b c']");
  EXPECT_EQ(Render("{{ 'xxhixx'.strip('x') }} {{ s.startswith(('a', 'h')) }} "
                   "{{ s.endswith('lo') }} {{ s.upper() }} {{ s.replace('l', 'L') }}",
                   R"({"s": "hello"})"),
            "hi True True HELLO heLLo");
  EXPECT_EQ(Render("{{ ' \\t x \\n'|trim }}|{{ 'ab'|length }}{{ '\u00e9'|length }}"), "x|21");
}

TEST(JinjaTest, TojsonMatchesPythonJsonDumps) {
  EXPECT_EQ(Render("{{ v|tojson }}", R"({"v": {"b": [1, 2.5, 1e-7, 1e20, true, null],
                                            "a": "\u00e9\"\n<"}})"),
            "{\"b\": [1, 2.5, 1e-07, 1e+20, true, null], \"a\": \"\xC3\xA9\\\"\\n<\"}");
  EXPECT_EQ(Render("{{ v|tojson(indent=2) }}", R"({"v": {"a": [1]}})"),
            "{\n  \"a\": [\n    1\n  ]\n}");
  EXPECT_EQ(Render("{{ 3.0 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 123456789012345.6 }}"),
            "3.0 0.30000000000000004 1e+16 123456789012345.6");
}

// JSON integers above INT64_MAX (a tool schema's "maximum": 18446744073709551615) print with
// their digits, as Python's ints do; they wrapped to negative numbers before.
TEST(JinjaTest, IntegersBeyondInt64KeepTheirDigits) {
  EXPECT_EQ(Render("{{ n }} {{ n|tojson }} {{ [n]|string }} {{ {'n': n}|tojson }} "
                   "{{ n is integer }}{{ n is float }}{{ n is number }} {{ n > 1 }}",
                   R"({"n": 18446744073709551615})"),
            "18446744073709551615 18446744073709551615 [18446744073709551615] "
            "{\"n\": 18446744073709551615} TrueFalseTrue True");
  EXPECT_EQ(Render("{{ n }}", R"({"n": 9223372036854775807})"), "9223372036854775807");
}

// repr() (a list or dict printed whole, e.g. content given as a list of parts in the Qwen3,
// Qwen2.5 and Llama 3.1 templates) escapes every code point Python's str.isprintable() rejects,
// not only the Latin-1 ones: line and paragraph separators, format characters, non-ASCII spaces,
// private-use and unassigned code points.
TEST(JinjaTest, ReprEscapesNonPrintableCodePoints) {
  EXPECT_EQ(
      Render(
          "{{ [s] }}",
          R"({"s": "a\u2028b\u200b\u00a0\ue000\udb40\udc01 \u3000x\u0378\u007f\u00e9\ud83d\ude00"})"),
      "['a\\u2028b\\u200b\\xa0\\ue000\\U000e0001 \\u3000x\\u0378\\x7f\u00e9\U0001F600']");
}

TEST(JinjaTest, TestsOnValues) {
  EXPECT_EQ(Render("{{ x is defined }}{{ y is undefined }}{{ n is none }}{{ s is string }}"
                   "{{ d is mapping }}{{ l is sequence }}{{ s is iterable }}{{ 1 is number }}"
                   "{{ t is true }}{{ 0 is false }}{{ 4 is even }}{{ 1.5 is integer }}",
                   R"({"x": 1, "n": null, "s": "a", "d": {}, "l": [], "t": true})"),
            "TrueTrueTrueTrueTrueTrueTrueTrueTrueFalseTrueFalse");
  EXPECT_EQ(Render("{{ x is not none }}", R"({"x": 0})"), "True");
}

TEST(JinjaTest, FiltersOnCollections) {
  EXPECT_EQ(Render("{{ xs|join(', ') }}|{{ xs|first }}{{ xs|last }}|{{ xs|reverse|list }}|"
                   "{{ xs|length }}|{{ xs|unique|list }}|{{ xs|sort }}",
                   R"({"xs": [3, 1, 3]})"),
            "3, 1, 3|33|[3, 1, 3]|3|[3, 1]|[1, 3, 3]");
  EXPECT_EQ(Render("{{ ms|selectattr('role', 'equalto', 'user')|map(attribute='c')|join }}"
                   "{{ ms|rejectattr('role', 'equalto', 'user')|list|length }}",
                   R"({"ms": [{"role": "user", "c": "a"}, {"role": "tool", "c": "b"},
                             {"role": "user", "c": "c"}]})"),
            "ac1");
  EXPECT_EQ(Render("{{ u|default('d') }}{{ ''|default('e', true) }}{{ 0|string }}"), "de0");
  EXPECT_EQ(Render("{{ d.get('a') }}{{ d.get('z', 9) }}{{ d.keys()|list }}{{ d['a'] }}",
                   R"({"d": {"a": 1}})"),
            "19['a']1");
}

// Jinja2's map, select, reject, selectattr and rejectattr yield nothing for a falsy value
// (`if value:` guards the loop), so `none|selectattr(...)|list` is []; meetkai's functionary
// v3.1 template filters `tools` that way when no tools are given.
TEST(JinjaTest, SelectAndMapOnFalsyValuesYieldNothing) {
  EXPECT_EQ(Render("{{ t|selectattr('type', 'equalto', 'x')|list|length }}"
                   "{{ t|rejectattr('type')|list }}{{ t|map(attribute='a')|list }}"
                   "{{ t|select|list }}{{ t|reject('none')|list }}{{ ''|map('upper')|list }}",
                   R"({"t": null})"),
            "0[][][][][]");
  EXPECT_EQ(Render("{{ 5|select|list }}"), "ERROR: template line 1: 'int' object is not iterable");
}

TEST(JinjaTest, UnsupportedConstructsFailAtParse) {
  EXPECT_THAT(Template::Parse("{{ x|wordwrap }}").status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Template::Parse("{% include 'x' %}").status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Template::Parse("{{ x is prime }}").status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Template::Parse("{% if x %}unterminated").status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Template::Parse("{{ 'unterminated }}").status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Template::Parse("{% raw %}x{% endraw %}").status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Template::Parse("{{ s.isdigit() }}").status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Template::Parse("{{ xs.append(1) }}").status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Template::Parse("{{ cycler(1, 2) }}").status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_TRUE(Template::Parse("{{ m() }}{% macro m() %}{% endmacro %}").ok());
}

TEST(JinjaTest, RuntimeErrorsAreStatuses) {
  EXPECT_EQ(Render("{{ x.y.z }}"),
            "ERROR: template line 1: 'x' is undefined (reading attribute 'y')");
  EXPECT_EQ(Render("{{ 'a' + 1 }}"),
            "ERROR: template line 1: unsupported operand type(s) for +: 'str' and 'int'");
  EXPECT_EQ(Render("\n{{ none.x.y }}"),
            "ERROR: template line 2: 'x' is undefined (reading attribute 'y')");
  EXPECT_EQ(Render("{{ raise_exception('boom') }}"), "ERROR: boom");
  EXPECT_EQ(Render("{% for x in 3 %}{% endfor %}"),
            "ERROR: template line 1: 'int' object is not iterable");
  EXPECT_EQ(Render("{{ x * x }}", R"({"x": 9223372036854775807})"),
            "ERROR: template line 1: integer overflow in *");
  EXPECT_EQ(Render("{{ 2 ** 70 }}"), "ERROR: template line 1: integer overflow in **");
  EXPECT_EQ(Render("{{ 1 ** 1000000000 }}"), "1");
}

// Damaged templates (a random span cut out of a real-looking one) parse or fail cleanly, and
// what parses renders or fails cleanly: never a crash, hang or out-of-bounds read.
TEST(JinjaTest, DamagedTemplatesFailCleanly) {
  const std::string source =
      "{%- macro show(v, q=false) -%}{{ ('\"' ~ v ~ '\"') if q else v }}{%- endmacro -%}\n"
      "{%- set ns = namespace(n=0) %}\n"
      "{%- for m in messages[::-1] if m.role != 'tool' %}\n"
      "  {%- set ns.n = ns.n + loop.index %}{{ show(m.content | trim, true) }}\n"
      "  {%- if m.tool_calls is defined %}{% for k, v in m.tool_calls[0]|items %}{{ k }}={{ "
      "v|tojson }}"
      "{% endfor %}{% endif %}\n"
      "{%- endfor %}{{ ns.n }}{# done #}{{ 'x'.split('x')[-1] }}";
  ValueDict ctx;
  ctx.Set("messages", Value::FromJson(nlohmann::ordered_json::parse(
                          R"([{"role": "user", "content": " hi "},
                              {"role": "assistant", "content": "a", "tool_calls": [{"n": 1}]}])")));
  absl::StatusOr<std::unique_ptr<Template>> whole = Template::Parse(source);
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_TRUE((*whole)->Render(ctx).ok());
  uint64_t state = 12345;
  for (int i = 0; i < 3000; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const size_t at = (state >> 33) % source.size();
    const size_t len = 1 + (state >> 17) % 12;
    std::string damaged = source;
    damaged.erase(at, len);

    absl::StatusOr<std::unique_ptr<Template>> t = Template::Parse(damaged);
    if (!t.ok()) {
      EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << damaged;
      continue;
    }
    absl::StatusOr<std::string> out = (*t)->Render(ctx);
    if (!out.ok()) {
      EXPECT_NE(out.status().code(), absl::StatusCode::kInternal) << damaged;
    }
  }
}

TEST(JinjaTest, RunawayTemplatesHitLimits) {
  TemplateOptions options;
  options.max_loop_iterations = 100;
  absl::StatusOr<std::unique_ptr<Template>> t =
      Template::Parse("{% for i in range(1000) %}x{% endfor %}", options);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT((*t)->Render({}).status(), StatusIs(absl::StatusCode::kResourceExhausted));

  absl::StatusOr<std::unique_ptr<Template>> r =
      Template::Parse("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT((*r)->Render({}).status(), StatusIs(absl::StatusCode::kResourceExhausted));
}

// A template nested past TemplateOptions::max_nesting is refused at parse with the line, not
// a stack overflow, however it nests: blocks, parentheses, `not`, signs, or chains of
// operators, filters and attributes that the parser builds in loops. The chains are cut off
// unterminated too, so that the refused partial tree must be freed without recursion.
TEST(JinjaTest, DeeplyNestedTemplatesFailAtParse) {
  const int n = 200000;
  auto repeat = [](std::string_view s, int times) {
    std::string out;
    for (int i = 0; i < times; ++i) out += s;
    return out;
  };
  const std::string chain_plus = "{{ 1" + repeat(" + 1", n);
  const std::string chain_filter = "{{ 'a'" + repeat("|trim", n);
  const std::string chain_attr = "{{ x" + repeat(".y", n);
  const std::string chain_item = "{{ x" + repeat("[0]", n);
  for (const std::string& source :
       {repeat("{% if x %}", n) + "a" + repeat("{% endif %}", n), repeat("{% for m in xs %}", n),
        "{{ " + repeat("(", n) + "1" + repeat(")", n) + " }}", "{{ " + repeat("not ", n) + "x }}",
        "{{ " + repeat("-", n) + "1 }}", "{{ " + repeat("[", n) + repeat("]", n) + " }}",
        chain_plus + " }}", chain_plus, chain_filter + " }}", chain_filter, chain_attr + " }}",
        chain_attr, chain_item + " }}", "{{ 1" + repeat(" and 1", n) + " }}",
        "{{ 1" + repeat(" == 1", n) + " }}"}) {
    absl::StatusOr<std::unique_ptr<Template>> t = Template::Parse(source);
    EXPECT_THAT(t.status(), StatusIs(absl::StatusCode::kInvalidArgument)) << source.substr(0, 40);
  }
  EXPECT_THAT(Template::Parse(chain_plus + " }}").status().message(),
              ::testing::HasSubstr("nested deeper than 128 levels"));
}

// What the bound lets through renders, even at the deepest macro recursion the renderer
// allows: a body near the nesting bound in each of 64 nested calls stays on the stack.
TEST(JinjaTest, TemplatesWithinTheNestingBoundRenderAtTheDeepestMacroCalls) {
  auto repeat = [](std::string_view s, int times) {
    std::string out;
    for (int i = 0; i < times; ++i) out += s;
    return out;
  };
  const int blocks = 20;
  const std::string source = "{% macro f(n) %}" + repeat("{% if true %}", blocks) +
                             "{% if n < 63 %}{{ f(n + 1) }}{% else %}{{ 1" + repeat(" + 1", 70) +
                             " }}{% endif %}" + repeat("{% endif %}", blocks) +
                             "{% endmacro %}{{ f(0) }}";
  absl::StatusOr<std::unique_ptr<Template>> t = Template::Parse(source);
  ASSERT_TRUE(t.ok()) << t.status();
  absl::StatusOr<std::string> out = (*t)->Render({});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "71");

  TemplateOptions options;
  options.max_nesting = 20;
  EXPECT_THAT(Template::Parse(source, options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace cairn::infer::text::jinja
