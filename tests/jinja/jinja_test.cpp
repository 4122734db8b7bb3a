// okapi's Jinja renderer, construct by construct: the expected strings are what Python's Jinja2
// 3.1.6 renders with Hugging Face's settings (trim_blocks, lstrip_blocks, sandbox), checked once by
// hand; tests/jinja/jinja_oracle.py compares many more against Jinja2 itself. Then the safety limits
// and error messages.
#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "jinja/chat_template.hpp"

namespace {

using nlohmann::ordered_json;
using okapi::jinja::ChatTemplate;
using okapi::jinja::RenderInputs;
using okapi::jinja::TemplateError;
using okapi::jinja::TemplateRaised;

RenderInputs inputs_with(ordered_json extra = ordered_json::object()) {
  RenderInputs inputs;
  inputs.messages = ordered_json::parse(R"([{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"},
                                            {"role": "assistant", "content": "Yo"}])");
  inputs.bos_token = "<s>";
  inputs.eos_token = "</s>";
  inputs.extra = std::move(extra);
  inputs.now = 1785067200;  // 2026-07-26 12:00:00 UTC
  return inputs;
}

std::string render(const std::string& source, ordered_json extra = ordered_json::object()) {
  return ChatTemplate::parse(source, "t").render(inputs_with(std::move(extra)));
}

// The message of the TemplateError that rendering (or parsing) source throws; "" if none.
std::string error_of(const std::string& source, ordered_json extra = ordered_json::object()) {
  try {
    render(source, std::move(extra));
  } catch (const TemplateError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(JinjaWhitespace, TrimAndLstripBlocks) {
  EXPECT_EQ(render("a\n  {% if true %}\n    b\n  {% endif %}\nc"), "a\n    b\nc");
  EXPECT_EQ(render("{% for i in range(3) %}\n  {{ i }}\n{% endfor %}\n"), "  0\n  1\n  2\n");
  EXPECT_EQ(render("  {# comment #}\nline"), "line");
  EXPECT_EQ(render("x  {{ 1 }}"), "x  1");  // lstrip_blocks leaves {{ alone
}

TEST(JinjaWhitespace, Modifiers) {
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(render("a\n  {%+ if true %}b{% endif +%}\nc"), "a\n  b\nc");
  EXPECT_EQ(render("x {{- ' y ' -}} z"), "x y z");
  EXPECT_EQ(render("a\n  {#- c -#}  end"), "aend");
}

TEST(JinjaWhitespace, RawNewlinesAndTrailingNewline) {
  EXPECT_EQ(render("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
  EXPECT_EQ(render("|  {%- raw -%}  x  {%- endraw -%}  |"), "|x|");
  EXPECT_EQ(render("l1\r\nl2\rl3\n\n"), "l1\nl2\nl3\n");
  EXPECT_EQ(render("{{ {'a': {'b': 1}} }}"), "{'a': {'b': 1}}");
}

TEST(JinjaValues, PrintsLikePython) {
  EXPECT_EQ(render("{{ [1, 'a', none, true, 1.0, {'k': [2]}] }}"), "[1, 'a', None, True, 1.0, {'k': [2]}]");
  EXPECT_EQ(render("{{ (1,) }}{{ () }}{{ (1, 2) }}"), "(1,)()(1, 2)");
  EXPECT_EQ(render("{{ \"it's\" }} {{ [\"it's\", 'a\"b', 'a\\nb'] }}"), "it's [\"it's\", 'a\"b', 'a\\nb']");
  EXPECT_EQ(render("{{ none }}|{{ undefined_name }}|{{ true }}"), "None||True");
  EXPECT_EQ(render("{{ namespace(a=1) }}"), "<Namespace {'a': 1}>");
}

TEST(JinjaValues, Numbers) {
  EXPECT_EQ(render("{{ 1 + 2 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 10 / 2 }}"),
            "3 3.5 3 -4 2 1024 0.5 5.0");
  EXPECT_EQ(render("{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e16 }} {{ 1e15 }} {{ 1.5e-5 }} {{ 0.0001 }} {{ -0.0 }}"),
            "1.0 0.30000000000000004 1e+20 1e+16 1000000000000000.0 1.5e-05 0.0001 -0.0");
  EXPECT_EQ(render("{{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1_000 }}"), "3.0 0.5 31 15 5 1000");
  EXPECT_EQ(render("{{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 7|round }}"), "2.0 4.0 2.67 7");
}

TEST(JinjaValues, StringLiteralsAndEscapes) {
  EXPECT_EQ(render("{{ 'multi' \"part\" }}"), "multipart");
  EXPECT_EQ(render("{{ '\\x41\\u00e9\\t|\\101|\\q' }}"), "A\xC3\xA9\t|A|\\q");
}

TEST(JinjaOperators, ComparisonsLogicAndConcat) {
  EXPECT_EQ(render("{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }} {{ true == 1 }}"),
            "True False True True True");
  EXPECT_EQ(render("{{ 'a' in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }}"), "True True True True");
  EXPECT_EQ(render("{{ true and 'x' }} {{ 0 or 'y' }} {{ none or 0 }} {{ not none }}"), "x y 0 True");
  EXPECT_EQ(render("{{ 'a' if 0 else 'b' }}|{{ 'a' if 0 }}|"), "b||");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none ~ [1] }} {{ 'ab' * 2 }} {{ [1] + [2] }}"), "a1None[1] abab [1, 2]");
}

TEST(JinjaSubscripts, SlicesAndNegativeIndices) {
  EXPECT_EQ(render("{{ [0, 1, 2, 3, 4][1:3] }} {{ [0, 1, 2, 3, 4][::-1] }} {{ [0, 1, 2, 3, 4][-2:] }} {{ [0, 1, 2][5:] }}"),
            "[1, 2] [4, 3, 2, 1, 0] [3, 4] []");
  EXPECT_EQ(render("{{ 'h\xC3\xA9llo'[1:4] }} {{ 'hello'[::-1] }} {{ 'abc'[-1] }} {{ messages[-1].content }}"),
            "\xC3\xA9ll olleh c Yo");
  EXPECT_EQ(render("{{ messages[0]['role'] }} {{ messages[0].role }} {{ messages.0.role }}"), "system system system");
}

TEST(JinjaLoops, LoopVariables) {
  EXPECT_EQ(render("{% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
                   "{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}"),
            "1032TrueFalse3;2121FalseFalse3;3210FalseTrue3;");
  EXPECT_EQ(render("{% for i in [1, 2, 3] %}{{ loop.previtem is defined }}{{ loop.nextitem|default('-') }}{% endfor %}"),
            "False2True3True-");
  EXPECT_EQ(render("{% for i in range(5) %}{{ loop.cycle('a', 'b') }}{% endfor %}"), "ababa");
}

TEST(JinjaLoops, ElseFilterUnpackingAndControl) {
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for m in messages if m.role != 'system' %}{{ loop.index }}/{{ loop.length }}{{ m.role }} {% endfor %}"),
            "1/2user 2/2assistant ");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': [2]}.items() %}{{ k }}={{ v }};{% endfor %}"), "a=1;b=[2];");
  EXPECT_EQ(render("{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}"
                   "{{ i }}{% endfor %}"),
            "0134");
  EXPECT_EQ(render("{% for c in 'h\xC3\xA9' %}{{ c }}.{% endfor %}"), "h.\xC3\xA9.");
}

TEST(JinjaScoping, LoopsHaveTheirOwnScopeNamespacesDoNot) {
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = x + i %}{{ x }},{% endfor %}{{ x }}"), "12,13,1");
  EXPECT_EQ(render("{% if true %}{% set z = 3 %}{% endif %}{{ z }}"), "3");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}"), "3");
  EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ a }}{{ b }}"), "12");
  EXPECT_EQ(render("{% set block %} in {{ 1 + 1 }} {% endset %}[{{ block }}]{% set u | upper %}up{% endset %}{{ u }}"),
            "[ in 2 ]UP");
  EXPECT_EQ(render("{% with a = 1 %}{{ a }}{% endwith %}{{ a is defined }}"), "1False");
}

TEST(JinjaMacros, ArgumentsDefaultsCallerAndRecursion) {
  EXPECT_EQ(render("{% macro m(a, b='d', c=none) %}[{{ a }}|{{ b }}|{{ c }}]{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(1, c=3) }}"),
            "[1|d|None][1|2|None][1|d|3]");
  EXPECT_EQ(render("{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }}"), "(1, 2){'k': 3}");
  EXPECT_EQ(render("{% macro o() %}<{{ caller() }}>{% endmacro %}{% call o() %}in{% endcall %}"), "<in>");
  EXPECT_EQ(render("{% macro l(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(x) l([1, 2]) %}({{ x }}){% endcall %}"),
            "(1)(2)");
  EXPECT_EQ(render("{% macro r(n) %}{{ n }}{% if n > 0 %}{{ r(n - 1) }}{% endif %}{% endmacro %}{{ r(3) }}"), "3210");
  EXPECT_EQ(render("{% macro m() %}{{ y }}{% endmacro %}{% set y = 5 %}{{ m() }}"), "5");
  EXPECT_EQ(render("{% filter upper %}abc {{ 'd' }}{% endfilter %}{% generation %}g{% endgeneration %}"), "ABC Dg");
}

TEST(JinjaFilters, Strings) {
  EXPECT_EQ(render("{{ '  x  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 'h\xC3\xA9'|length }}|{{ 'a b'|upper }}|{{ 'A'|lower }}"),
            "x|a|2|A B|a");
  EXPECT_EQ(render("{{ 'hello wORLD'|title }} {{ 'hello World'|capitalize }} {{ 'aaa'|replace('a', 'b', 2) }}"),
            "Hello World Hello world bba");
  EXPECT_EQ(render("{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}"), "a\n    b\n\n    c|  a\n  b");
  EXPECT_EQ(render("{{ '<a>&\\''|e }} {{ '%s-%d-%05.1f'|format('a', 3, 2.25) }} {{ 'one two  three'|wordcount }}"),
            "&lt;a&gt;&amp;&#39; a-3-002.2 3");
  EXPECT_EQ(render("{{ 42|string }} {{ '42'|int + 1 }} {{ 'x'|int(5) }} {{ '2.5'|float }} {{ -3|abs }}"), "42 43 5 2.5 3");
}

TEST(JinjaFilters, TojsonAsHuggingFace) {
  EXPECT_EQ(render("{{ {'a': [1, 1.5, none, true], 'b': '\xC3\xBC\"\\n'}|tojson }}"),
            "{\"a\": [1, 1.5, null, true], \"b\": \"\xC3\xBC\\\"\\n\"}");
  EXPECT_EQ(render("{{ {'a': [1]}|tojson(indent=2) }}"), "{\n  \"a\": [\n    1\n  ]\n}");
  EXPECT_EQ(render("{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}{{ {'a': 1}|tojson(separators=(',', ':')) }}"),
            "{\"a\": 2, \"b\": 1}{\"a\":1}");
  EXPECT_TRUE(contains(error_of("{{ undefined_name|tojson }}"), "Object of type Undefined is not JSON serializable"));
}

TEST(JinjaFilters, Sequences) {
  EXPECT_EQ(render("{{ [1, 2]|join(', ') }} {{ messages|map(attribute='role')|join('/') }} {{ [3, 1, 2]|sort }}"),
            "1, 2 system/user/assistant [1, 2, 3]");
  EXPECT_EQ(render("{{ [3, 1]|first }}{{ [3, 1]|last }} {{ 'ab'|list }} {{ [1, 2]|reverse|list }} {{ ['a', 'A', 'b']|unique|list }}"),
            "31 ['a', 'b'] [2, 1] ['a', 'b']");
  EXPECT_EQ(render("{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3]|reject('even')|list }} {{ [0, 1, '']|select|list }}"),
            "[1, 3] [1, 3] [1]");
  EXPECT_EQ(render("{{ messages|selectattr('role', 'equalto', 'user')|list|length }} "
                   "{{ messages|rejectattr('role', 'in', ['user'])|map(attribute='role')|list }}"),
            "1 ['system', 'assistant']");
  EXPECT_EQ(render("{{ {'b': 1, 'a': 2}|dictsort }} {{ {'a': 1}|items|list }} {{ [1, 2, 3]|sum }} {{ [3, 1]|min }}{{ [3, 1]|max }}"),
            "[('a', 2), ('b', 1)] [('a', 1)] 6 13");
  EXPECT_EQ(render("{{ [1, 2, 3]|batch(2, 0)|list }} {{ none|default('n') }} {{ x|d('u') }} {{ ''|default('e', true) }}"),
            "[[1, 2], [3, 0]] None u e");
}

TEST(JinjaTests, TypesAndComparisons) {
  EXPECT_EQ(render("{{ x is defined }}{{ x is undefined }}{{ none is none }}{{ 'a' is string }}{{ 1 is number }}"
                   "{{ 1.5 is float }}{{ 1 is integer }}{{ true is boolean }}{{ {} is mapping }}{{ [] is iterable }}"),
            "FalseTrueTrueTrueTrueTrueTrueTrueTrueTrue");
  EXPECT_EQ(render("{{ 2 is even }}{{ 3 is odd }}{{ 6 is divisibleby 3 }}{{ 1 is eq 1 }}{{ 1 is equalto 2 }}"
                   "{{ none is sameas none }}{{ true is true }}{{ 0 is false }}{{ 1 is in [1] }}{{ 3 is gt 2 }}"),
            "TrueTrueTrueTrueFalseTrueTrueFalseTrueTrue");
  EXPECT_EQ(render("{{ 1 is not string }} {{ raise_exception is callable }} {{ 'a' is sequence }}"), "True True True");
}

TEST(JinjaMethods, StrDictList) {
  EXPECT_EQ(render("{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a,b,c'.rsplit(',', 1) }}"),
            "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b c'] ['a,b', 'c']");
  EXPECT_EQ(render("{{ ' x '.strip() }}|{{ 'xyx'.strip('x') }}|{{ ' x'.lstrip() }}|{{ 'x '.rstrip() }}|"), "x|y|x|x|");
  EXPECT_EQ(render("{{ 'Hello'.startswith('He') }} {{ 'Hello'.endswith(('x', 'lo')) }} {{ 'hello'.find('l') }} "
                   "{{ 'hello'.count('l') }} {{ '-'.join(['a', 'b']) }} {{ 'ab'.upper() }} {{ 'aXa'.replace('a', 'b') }}"),
            "True True 2 2 a-b AB bXb");
  EXPECT_EQ(render("{{ '{} {}'.format(1, 'two') }} {{ '{0}{1}{0}'.format('a', 'b') }} {{ '{x}!'.format(x=3) }} {{ '{:05.2f}'.format(3.14159) }}"),
            "1 two aba 3! 03.14");
  EXPECT_EQ(render("{{ messages[0].get('role') }} {{ messages[0].get('no', 'd') }} {{ messages[0].get('no') }} {{ messages[0].keys()|list }}"),
            "system d None ['role', 'content']");
  EXPECT_EQ(render("{{ messages[0].items() | list }} {{ [1, 2, 1].count(1) }} {{ [1, 2].index(2) }}"),
            "[('role', 'system'), ('content', 'S')] 2 1");
}

TEST(JinjaContext, VariablesHuggingFacePasses) {
  EXPECT_EQ(render("{{ bos_token }}{{ eos_token }} {{ add_generation_prompt }} {{ tools is defined }}"), "<s></s> True False");
  setenv("TZ", "UTC", 1);  // strftime_now renders local time
  tzset();
  EXPECT_EQ(render("{{ strftime_now('%Y-%m-%d %H:%M') }}"), "2026-07-26 12:00");
  EXPECT_EQ(render("{{ custom }} {{ bos_token }}", {{"custom", "kw"}, {"bos_token", "B"}}), "kw B");
  RenderInputs inputs = inputs_with();
  inputs.tools = ordered_json::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  EXPECT_EQ(ChatTemplate::parse("{{ tools[0].function.name }}").render(inputs), "f");
}

TEST(JinjaUndefined, BehavesLikeJinjasDefaultUndefined) {
  EXPECT_EQ(render("[{{ nope }}]{{ nope|length }}{% for x in nope %}x{% endfor %}{{ nope is defined }}{{ not nope }}"),
            "[]0FalseTrue");
  EXPECT_EQ(render("{{ messages[0].missing }}|{{ messages[0]['missing'] }}|{{ messages[9] }}|"), "|||");
  EXPECT_EQ(error_of("{{ nope.attr }}"), "t, line 1: 'nope' is undefined");
  EXPECT_EQ(error_of("\n{{ messages[0].missing.deeper }}"), "t, line 2: 'dict object' has no attribute 'missing'");
  EXPECT_EQ(error_of("{{ nope + 1 }}"), "t, line 1: 'nope' is undefined");
  EXPECT_TRUE(contains(error_of("{{ (1 if false).x }}"), "evaluated to false and no else section was defined"));
}

// Jinja2's select / reject / selectattr / rejectattr / map start with `if value:`, so over none or
// undefined they yield nothing; what they give is a generator (always true, no len(), no JSON).
TEST(JinjaGenerators, FilterOverNoneYieldsNothing) {
  const ordered_json none_content = {{"n", nullptr}, {"m", {{"content", nullptr}}}};
  EXPECT_EQ(render("{{ n|select|list }}{{ n|selectattr('a', 'equalto', 1)|list }}{{ n|reject('none')|list }}"
                   "{{ n|rejectattr('a')|list }}{{ n|map(attribute='x')|list }}{{ undef|selectattr('a')|list }}",
                   none_content),
            "[][][][][][]");
  EXPECT_EQ(render("{{ n|select('nosuchtest')|list|length }}|{{ n|select|first }}|{% for c in m.content|selectattr('type') %}x"
                   "{% else %}empty{% endfor %}",
                   none_content),
            "0||empty");
  EXPECT_TRUE(contains(error_of("{{ n|list }}", none_content), "'NoneType' object is not iterable"));
  EXPECT_TRUE(contains(error_of("{{ [5]|select('nosuchtest')|list }}"), "No test named 'nosuchtest'."));
}

TEST(JinjaGenerators, BehaveAsGeneratorsNotLists) {
  EXPECT_EQ(render("{% if [0]|select %}t{% endif %}{{ [3, 1, 2]|select|sort }}{{ [1, 2]|select|join('-') }}"
                   "{{ [1, 2]|select is sequence }}{{ [1, 2]|select is iterable }}{{ ([1, 2]|select)[0] is defined }}"),
            "t[1, 2, 3]1-2FalseTrueFalse");
  EXPECT_TRUE(contains(error_of("{{ [1, 2]|select|length }}"), "object of type 'generator' has no len()"));
  EXPECT_TRUE(contains(error_of("{{ [1, 2]|select|last }}"), "'generator' object is not reversible"));
  EXPECT_TRUE(contains(error_of("{{ messages|map(attribute='role')|tojson }}"), "Object of type generator is not JSON serializable"));
  EXPECT_TRUE(contains(error_of("{{ [1]|select + [2] }}"), "unsupported operand type(s) for +: 'generator' and 'list'"));
}

// |safe and |e give Markup: `+`, `%` and format() escape the plain operands, `~` and the filters
// that work on plain str (join, replace, title) give plain str again.
TEST(JinjaMarkup, ConcatenationEscapesThePlainOperand) {
  EXPECT_EQ(render("{{ '<b>'|safe + '<i>' }}|{{ '<i>' + '<b>'|safe }}|{{ '<b>'|safe ~ '<i>' }}|{{ ('<b>'|safe ~ '<i>') + '<u>' }}"),
            "<b>&lt;i&gt;|&lt;i&gt;<b>|<b><i>|<b><i><u>");
  EXPECT_EQ(render("{{ 'x'|safe + '\\'\"&' }}|{{ '<b>'|e }}|{{ '<b>'|e + '<' }}|{{ '<b>'|safe|e }}|{{ '<b>'|e|e }}|{{ '<b>'|safe|forceescape }}"),
            "x&#39;&#34;&amp;|&lt;b&gt;|&lt;b&gt;&lt;|<b>|&lt;b&gt;|&lt;b&gt;");
  // Functionary v3.1 and Mistral write tool definitions this way.
  EXPECT_EQ(render("{{ \"'\"|safe + t.name + \"'\"|safe + t|tojson }}", {{"t", {{"name", "a<b"}}}}),
            "'a&lt;b'{&#34;name&#34;: &#34;a&lt;b&#34;}");
  EXPECT_TRUE(contains(error_of("{{ '<b>'|safe + 1 }}"), "unsupported operand type(s) for +: 'Markup' and 'int'"));
}

TEST(JinjaMarkup, MethodsFiltersAndFormatting) {
  EXPECT_EQ(render("{{ ('<b>{}'|safe).format('<x>') }}|{{ ('<b>%s %d'|safe) % ('<x>', 1) }}|{{ ('<%s'|safe|format('<')) + '<' }}"),
            "<b>&lt;x&gt;|<b>&lt;x&gt; 1|<&lt;&lt;");
  EXPECT_EQ(render("{{ ('<b>'|safe|upper) + '<' }}|{{ ('<b>'|safe|string) + '<' }}|{{ ('<b>'|safe|title) + '<' }}|"
                   "{{ ['<a>'|safe, '<b>']|join(',') + '<' }}|{{ ('<b>'|safe).replace('b', '<') }}|{{ ('<b>'|safe)[0] + '<' }}"),
            "<B>&lt;|<b>&lt;|<B><|<a>,<b><|<&lt;>|<&lt;");
  EXPECT_EQ(render("{{ '<b>'|safe|length }}{{ '<b>'|safe == '<b>' }}{{ '<b>'|safe is escaped }}{{ ['<b>'|safe] }}"),
            "3TrueTrue[Markup('<b>')]");
}

TEST(JinjaErrors, RaiseExceptionCarriesTheExactMessage) {
  try {
    render("{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}");
    FAIL() << "no exception";
  } catch (const TemplateRaised& e) {
    EXPECT_STREQ(e.what(), "System role not supported");
  }
}

TEST(JinjaErrors, SandboxRefusesMutation) {
  EXPECT_EQ(error_of("{% set l = [1] %}{{ l.append(2) }}"), "t, line 1: access to attribute 'append' of 'list' object is unsafe.");
  EXPECT_TRUE(contains(error_of("{{ {'a': 1}.pop('a') }}"), "access to attribute 'pop' of 'dict' object is unsafe."));
  EXPECT_TRUE(contains(error_of("{% set x = 1 %}{% set x.y = 2 %}"), "non-namespace object"));
}

TEST(JinjaErrors, TypeErrorsAndSyntaxErrorsNameTheLine) {
  EXPECT_TRUE(contains(error_of("{{ 'a' < 1 }}"), "'<' not supported between instances of 'str' and 'int'"));
  EXPECT_TRUE(contains(error_of("{{ 1 / 0 }}"), "division by zero"));
  EXPECT_TRUE(contains(error_of("{% for x in none %}{% endfor %}"), "'NoneType' object is not iterable"));
  EXPECT_TRUE(contains(error_of("{{ x|nosuchfilter }}"), "No filter named 'nosuchfilter'."));
  EXPECT_TRUE(contains(error_of("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"), "takes not more than 1 argument(s)"));
  EXPECT_EQ(error_of("a\nb\n{% if %}{% endif %}"), "t, line 3: Expected an expression, got end of statement block");
  EXPECT_TRUE(contains(error_of("{% for x in y %}"), "Jinja was looking for the following tags: 'endfor' or 'else'"));
  EXPECT_TRUE(contains(error_of("{% endfor %}"), "Encountered unknown tag 'endfor'."));
  EXPECT_TRUE(contains(error_of("{{ 1 + }}"), "t, line 1:"));
  EXPECT_TRUE(contains(error_of("{# open"), "Missing end of comment tag"));
  EXPECT_TRUE(contains(error_of("{% raw %}x"), "Missing end of raw directive"));
  EXPECT_TRUE(contains(error_of("{{ 'x' ]}}"), "unexpected ']'"));
  EXPECT_TRUE(contains(error_of("{% include 'x' %}"), "not supported"));
  EXPECT_TRUE(contains(error_of("{% break %}"), "outside of a loop"));
}

TEST(JinjaSafety, ParserNestingIsBounded) {
  const std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_TRUE(contains(error_of(deep), "nesting deeper than"));
  std::string blocks;
  for (int i = 0; i < 2000; ++i) blocks += "{% if true %}";
  EXPECT_TRUE(contains(error_of(blocks), "nesting deeper than"));
  EXPECT_TRUE(contains(error_of("{{ " + std::string(100000, '-') + "1 }}"), "nesting deeper than"));
  EXPECT_TRUE(contains(error_of("{{ [" + std::string(3000, '[') + " }}"), "t, line 1"));
}

TEST(JinjaSafety, MacroRecursionIsBounded) {
  EXPECT_TRUE(contains(error_of("{% macro r() %}{{ r() }}{% endmacro %}{{ r() }}"), "nested deeper than"));
  EXPECT_TRUE(contains(error_of("{% macro r(n) %}{{ r(n ~ 'x') }}{% endmacro %}{{ r('') }}"), "nested deeper than"));
}

TEST(JinjaSafety, OutputAndWorkAreBounded) {
  EXPECT_TRUE(contains(error_of("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}"), "output larger than"));
  EXPECT_TRUE(contains(error_of("{{ 'x' * 100000000000 }}"), "output larger than"));
  EXPECT_TRUE(contains(error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"),
                       "steps"));
  EXPECT_TRUE(contains(error_of("{{ range(1000000000000)|length }}"), "steps"));
  EXPECT_TRUE(contains(error_of("{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}"),
                       "steps"));
  EXPECT_TRUE(contains(error_of("{{ [1] * 100000000000 }}"), "steps"));
  EXPECT_TRUE(contains(error_of("{{ 2 ** 100 }}"), "integer overflow"));
  EXPECT_TRUE(contains(error_of("{{ 99999999999999999999 }}"), "out of range"));
}

TEST(JinjaSafety, InvalidUtf8DoesNotCrash) {
  const std::string bad = "\xFF\xC3(\xE2\x82 \xF0\x9F";
  EXPECT_EQ(render("{{ s }}|{{ s|length }}|{{ s[1:3] }}|{{ s|upper }}", {{"s", "x"}}), "x|1||X");
  EXPECT_EQ(render(bad + "{{ 1 }}"), bad + "1");
  RenderInputs inputs = inputs_with();
  inputs.messages = ordered_json::array({ordered_json{{"role", "user"}, {"content", bad}}});
  const auto t = ChatTemplate::parse("{{ messages[0].content }}|{{ messages[0].content|length }}|{{ messages[0].content[::-1] }}"
                                     "|{{ messages[0].content|tojson }}|{{ messages[0] }}");
  const std::string out = t.render(inputs);
  EXPECT_EQ(out.substr(0, bad.size() + 3), bad + "|8|");
  EXPECT_NO_THROW(ChatTemplate::parse("{{ '" + bad + "' }}{{ x\xFF }}").render(inputs));
}

TEST(JinjaSafety, NamespaceCyclesAreReleased) {
  // Under ASan this would report a leak if the namespace kept itself alive after the render.
  EXPECT_EQ(render("{% set ns = namespace() %}{% set ns.self = ns %}{% set ns.l = [ns] %}ok"), "ok");
  EXPECT_EQ(render("{% set ns = namespace() %}{% macro m() %}{% endmacro %}{% set ns.m = m %}ok"), "ok");
}

TEST(JinjaSafety, DeepValuesAreRefusedNotOverflowed) {
  EXPECT_TRUE(contains(error_of("{% set ns = namespace(l=[]) %}{% for i in range(300) %}{% set ns.l = [ns.l] %}{% endfor %}"),
                       "nested deeper than 256"));
  // A long chain of namespaces: built fine, refused when printed, freed without recursion.
  const std::string chain =
      "{% set h = namespace() %}{% set first = namespace() %}{% set h.cur = first %}{% for i in range(N) %}"
      "{% set c = h.cur %}{% set c.next = namespace() %}{% set h.cur = c.next %}{% endfor %}";
  EXPECT_EQ(render(chain.substr(0, chain.find("range(N)")) + "range(20000)" + chain.substr(chain.find("range(N)") + 8) + "built"),
            "built");
  EXPECT_TRUE(contains(error_of(chain.substr(0, chain.find("range(N)")) + "range(400)" + chain.substr(chain.find("range(N)") + 8) +
                                "{{ first }}"),
                       "nested deeper than 256"));
  EXPECT_EQ(render("{% for i in range(3) %}{% set x = loop.changed(loop.changed) %}{% endfor %}ok"), "ok");
  RenderInputs inputs = inputs_with();
  inputs.messages = ordered_json::array();
  ordered_json* inner = &inputs.messages;
  for (int i = 0; i < 1000; ++i) {
    inner->push_back(ordered_json::array());
    inner = &inner->back();
  }
  EXPECT_THROW(ChatTemplate::parse("{{ messages }}").render(inputs), TemplateError);
}

TEST(JinjaThreads, OneTemplateRendersOnSeveralThreads) {
  const auto chat_template = ChatTemplate::parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}<{{ m.role }}>{{ m.content|tojson }}"
      "{% endfor %}{{ ns.n }}{{ strftime_now('%Y') }}");
  const RenderInputs inputs = inputs_with();
  const std::string expected = chat_template.render(inputs);
  std::vector<std::thread> threads;
  std::vector<int> good(4, 0);
  for (std::size_t t = 0; t < good.size(); ++t) {
    threads.emplace_back([&chat_template, &inputs, &expected, &good, t] {
      for (int i = 0; i < 200; ++i) good[t] += chat_template.render(inputs) == expected ? 1 : 0;
    });
  }
  for (auto& thread : threads) thread.join();
  for (int count : good) EXPECT_EQ(count, 200);
  EXPECT_EQ(chat_template.source().substr(0, 6), "{% set");
}

}  // namespace
