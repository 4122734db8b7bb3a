#!/usr/bin/env python3
"""Differential test of okapi's chat-template renderer against Python's Jinja2 itself.

Renders templates beyond the 248 reference cases (filters, tests, loops, whitespace control,
macros, slices, number formatting, errors) with Jinja2 configured as Hugging Face transformers
configures it, and with okapi (the render_template helper: JSON requests on stdin), and compares.

usage: jinja_oracle.py RENDER_TEMPLATE_BINARY
Exit 0: all agree; 1: a mismatch; 77: jinja2 missing (a skip, or a failure under OKAPI_REQUIRE_GOLDEN=1).
"""
import json
import os
import subprocess
import sys
from datetime import datetime

NOW = datetime(2026, 7, 26, 12, 0, 0)

try:
    import jinja2
    from jinja2 import nodes
    from jinja2.exceptions import TemplateError
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    required = os.environ.get("OKAPI_REQUIRE_GOLDEN", "") not in ("", "0")
    print("jinja_oracle: python3 has no jinja2 (apt-get install python3-jinja2)", file=sys.stderr)
    sys.exit(1 if required else 77)


class AssistantTracker(Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


class Raised(Exception):
    pass


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                    extensions=[AssistantTracker, jinja2.ext.loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = lambda fmt: NOW.strftime(fmt)

MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi  there\n  friend"},
    {"role": "assistant", "content": "Hello!", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1, "y": [1.5, None, True]}}}]},
    {"role": "user", "content": "Üñï ✓ 日本 🦊 'q' \"dq\""},
]
TOOLS = [{"type": "function", "function": {"name": "f", "description": "does f",
          "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}}}]

# (template, extra variables); messages/tools are always given, extras override.
CASES = [
    # whitespace control, trim_blocks / lstrip_blocks, comments, raw
    ("a\n  {% if true %}\n    b\n  {% endif %}\nc", {}),
    ("a  {%- if true -%}  b  {%- endif -%}  c", {}),
    ("a\n  {%+ if true %}b{% endif +%}\nc", {}),
    ("x {{- ' y ' -}} z\n{{ 'w' }}\n", {}),
    ("  {# comment #}\nline\n  {#- c -#}  end", {}),
    ("{% raw %}{{ not rendered }}{% endraw %}|  {%- raw -%}  x  {%- endraw -%}  |", {}),
    ("line1\r\nline2\rline3\n\n", {}),
    ("{% for i in range(3) %}\n  {{ i }}\n{% endfor %}\n", {}),
    ("\t{% if true %}tab{% endif %}\n", {}),
    ("{{ '{{' }}{{ '}}' }}{{ {'a': {'b': 1}} }}", {}),
    # loops
    ("{% for m in messages %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/"
     "{{ loop.first }}/{{ loop.last }}/{{ loop.length }};{% endfor %}", {}),
    ("{% for m in messages %}{{ loop.previtem.role if loop.previtem is defined else '-' }}>{{ m.role }}>"
     "{{ loop.nextitem.role if loop.nextitem is defined else '-' }} {% endfor %}", {}),
    ("{% for i in range(5) %}{{ loop.cycle('a', 'b', 'c') }}{% endfor %}", {}),
    ("{% for x in [] %}x{% else %}empty{% endfor %}", {}),
    ("{% for m in messages if m.role == 'user' %}{{ loop.index }}:{{ loop.length }}:{{ m.content[:2] }} {% endfor %}", {}),
    ("{% for k, v in {'a': 1, 'b': [2]}.items() %}{{ k }}={{ v }};{% endfor %}", {}),
    ("{% for a, b in [[1, 2], (3, 4)] %}{{ a + b }}{% endfor %}", {}),
    ("{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
    ("{% for i in range(2) %}{% for j in range(2) %}{{ loop.index }}{{ i }}{{ j }} {% endfor %}{% endfor %}", {}),
    ("{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = x + i %}{{ x }},{% endfor %}{{ x }}", {}),
    ("{% for c in 'héllo' %}{{ c }}.{% endfor %}{% for k in {'b': 1, 'a': 2} %}{{ k }}{% endfor %}", {}),
    ("{% for i in range(1, 10, 3) %}{{ i }}{% endfor %}{% for i in range(5, 0, -2) %}{{ i }}{% endfor %}", {}),
    ("{% for i in range(3) %}{{ loop.changed(i // 2) }}{% endfor %}", {}),
    # conditionals, scoping, namespace
    ("{% if false %}a{% elif none %}b{% elif 0 %}c{% else %}d{% endif %}", {}),
    ("{% if true %}{% set z = 3 %}{% endif %}{{ z }}", {}),
    ("{% set ns = namespace(count=0, items=[]) %}{% for m in messages %}{% set ns.count = ns.count + 1 %}"
     "{% set ns.items = ns.items + [m.role] %}{% endfor %}{{ ns.count }} {{ ns.items }}", {}),
    ("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = (1,) %}{{ t }}{{ () }}", {}),
    ("{% set block %}  inner {{ 1 + 1 }}  {% endset %}[{{ block }}]", {}),
    ("{% set up | upper %}shout{% endset %}{{ up }}", {}),
    ("{% with a = 1, b = 'x' %}{{ a }}{{ b }}{% endwith %}{{ a is defined }}", {}),
    # macros and call blocks
    ("{% macro m(a, b='dflt', c=none) %}[{{ a }}|{{ b }}|{{ c }}]{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(1, c=3) }}", {}),
    ("{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }}", {}),
    ("{% macro outer() %}<{{ caller() }}>{% endmacro %}{% call outer() %}inside{% endcall %}", {}),
    ("{% macro list(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}"
     "{% call(x) list([1, 2]) %}({{ x }}){% endcall %}", {}),
    ("{% macro rec(n) %}{{ n }}{% if n > 0 %}{{ rec(n - 1) }}{% endif %}{% endmacro %}{{ rec(5) }}", {}),
    ("{% macro m() %}{{ y }}{% endmacro %}{% set y = 5 %}{{ m() }}", {}),
    ("{% filter upper %}abc {{ 'def' }}{% endfilter %}", {}),
    ("{% generation %}gen {{ 1 }}{% endgeneration %}", {}),
    # operators and numbers
    ("{{ 1 + 2 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 10 / 2 }}", {}),
    ("{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e16 }} {{ 1e15 }} {{ 1.5e-5 }} {{ 0.0001 }} {{ -0.0 }} {{ 3.0 * 2 }} {{ 1_000 }}", {}),
    ("{{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 2 ** 0.5 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 12345678901234 * 1000 }}", {}),
    ("{{ 'a' ~ 1 ~ none ~ true ~ [1, 'b'] ~ {'k': 'v'} }}", {}),
    ("{{ 'ab' * 3 }}{{ [1] * 2 }}{{ 'x' + 'y' }}{{ [1] + [2] }}", {}),
    ("{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }} {{ true == 1 }} {{ none == none }}", {}),
    ("{{ 'a' in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} {{ 'x' not in 'y' }}", {}),
    ("{{ true and 'x' }} {{ 0 or 'y' }} {{ none or 0 }} {{ not none }} {{ 'a' if 0 else 'b' }} {{ 'a' if 1 }}", {}),
    ("{{ -3|abs }} {{ - 2 ** 2 }} {{ (1, 2)[0] }} {{ [1, 2, 3][-1] }} {{ 'abc'[1] }} {{ 'abc'[-1] }}", {}),
    ("{{ [True, False, None, 1.5, 'it\\'s', \"q\\\"\", '\\n'] }}", {}),
    ("{{ '\\x41\\u00e9\\t|\\101|\\q' }}", {}),
    # slices
    ("{{ [0, 1, 2, 3, 4][1:3] }} {{ [0, 1, 2, 3, 4][::-1] }} {{ [0, 1, 2, 3, 4][-2:] }} {{ [0, 1, 2, 3, 4][::2] }}"
     " {{ 'héllo'[1:4] }} {{ 'hello'[::-1] }} {{ [0, 1, 2][5:] }} {{ [0, 1, 2, 3][3:0:-1] }}", {}),
    ("{{ messages[1:][0].role }} {{ messages[-1]['content'][:3] }}", {}),
    # filters
    ("{{ '  x  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ [1, 2]|length }}|{{ 'héllo'|length }}|{{ {'a': 1}|count }}", {}),
    ("{{ messages[2]|tojson }}", {}),
    ("{{ tools|tojson(indent=2) }}", {}),
    ("{{ {'b': 1, 'a': [1, {'c': none}]}|tojson(sort_keys=true) }}{{ 'ü\"\\n'|tojson }}{{ 1.0|tojson }}", {}),
    ("{{ {'a': 1}|tojson(separators=(',', ':')) }}{{ [1,2]|tojson(indent='\\t') }}{{ []|tojson(indent=2) }}", {}),
    ("{{ {'a': 1, 'b': 2}|items|list }} {{ {'a': 1}|dictsort }} {{ {'b': 1, 'a': 2}|dictsort(by='value') }}", {}),
    ("{{ [1, 2, 3]|join(', ') }} {{ messages|map(attribute='role')|join('/') }} {{ ['a', 'b']|join }}", {}),
    ("{{ 'hello world'|upper }} {{ 'HeLLo'|lower }} {{ 'hello wORLD'|title }} {{ 'hello World'|capitalize }}", {}),
    ("{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'abc'|replace('', '-') }}", {}),
    ("{{ undefined_thing|default('d') }} {{ ''|default('e') }} {{ ''|default('e', true) }} {{ none|d('n') }}", {}),
    ("{{ [3, 1, 2]|first }} {{ [3, 1, 2]|last }} {{ 'abc'|first }} {{ 'abc'|list }} {{ [3, 1, 2]|sort }} {{ [3, 1, 2]|sort(reverse=true) }}", {}),
    ("{{ ['b', 'A', 'a', 'B']|sort }} {{ ['b', 'A', 'a', 'B']|sort(case_sensitive=true) }} {{ ['a', 'A', 'b']|unique|list }}", {}),
    ("{{ messages|sort(attribute='role')|map(attribute='role')|list }}", {}),
    ("{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('even')|list }} {{ [0, 1, '', 'a']|select|list }}", {}),
    ("{{ messages|selectattr('role', 'equalto', 'user')|list|length }} {{ messages|rejectattr('role', 'in', ['user'])|map(attribute='role')|list }}", {}),
    ("{{ messages|selectattr('tool_calls', 'defined')|list|length }} {{ [1, 5, 3]|select('gt', 2)|list }}", {}),
    ("{{ 42|string }} {{ '42'|int + 1 }} {{ '3.7'|int }} {{ 'x'|int(5) }} {{ '2.5'|float }} {{ 3|float }} {{ 'ff'|int(base=16) }}", {}),
    ("{{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 7|round }} {{ 2.1|round(0, 'ceil') }} {{ -2.5|round(0, 'floor') }}", {}),
    ("{{ [1, 2, 3]|reverse|list }} {{ 'abc'|reverse }} {{ [1, 2, 3]|sum }} {{ [1.5, 2]|sum }} {{ messages|sum(attribute='x', start=0) if false else '' }}", {}),
    ("{{ [3, 1, 2]|min }} {{ [3, 1, 2]|max }} {{ ['b', 'A']|min }} {{ []|max }}", {}),
    ("{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent('>', blank=true) }}", {}),
    ("{{ 'one two  three'|wordcount }} {{ [1, 2, 3, 4, 5]|batch(2)|list }} {{ [1, 2, 3]|batch(2, 0)|list }}", {}),
    ("{{ '<a href=\"x\">&\\'</a>'|e }} {{ '<b>'|safe }} {{ '%s-%d-%05.1f'|format('a', 3, 2.25) }} {{ 'x'|center(5) }}|", {}),
    ("{{ messages|map('string')|list|length }} {{ ['a', 'b']|map('upper')|list }}", {}),
    ("{{ 'long sentence here'|truncate(9) }} {{ 'foo bar baz qux'|truncate(9, true) }}", {}),
    # tests
    ("{{ x is defined }} {{ x is undefined }} {{ none is none }} {{ 'a' is string }} {{ 1 is number }} {{ 1.5 is float }}"
     " {{ 1 is integer }} {{ true is boolean }} {{ {} is mapping }} {{ [] is iterable }} {{ 'a' is sequence }}", {}),
    ("{{ raise_exception is callable }} {{ 2 is even }} {{ 3 is odd }} {{ 6 is divisibleby 3 }} {{ 1 is eq 1 }}"
     " {{ 1 is equalto 2 }} {{ none is sameas none }} {{ true is true }} {{ 0 is false }} {{ 1 is in [1] }}", {}),
    ("{{ 3 is gt 2 }} {{ 3 is ge 3 }} {{ 1 is lt 2 }} {{ 1 is le 0 }} {{ 1 is ne 2 }} {{ 'abc' is lower }} {{ 'A' is upper }}"
     " {{ 1 is not string }} {{ x is not defined and true }}", {}),
    # str / dict / list methods
    ("{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a,b,c'.rsplit(',', 1) }}", {}),
    ("{{ '  x '.strip() }}|{{ 'xxyxx'.strip('x') }}|{{ '  x '.lstrip() }}|{{ '  x '.rstrip() }}|", {}),
    ("{{ 'Hello'.startswith('He') }} {{ 'Hello'.endswith(('x', 'lo')) }} {{ 'hello'.upper() }} {{ 'HELLO'.lower() }}"
     " {{ 'hi there'.title() }} {{ 'aXa'.replace('a', 'b') }} {{ 'hello'.find('l') }} {{ 'hello'.rfind('l') }}"
     " {{ 'hello'.count('l') }} {{ '-'.join(['a', 'b']) }} {{ 'hello'.capitalize() }}", {}),
    ("{{ '{} and {}'.format(1, 'two') }} {{ '{0}{1}{0}'.format('a', 'b') }} {{ '{x}!'.format(x=3) }} {{ '{:>5}|{:<4}|{:^5}|{:05.2f}'.format('a', 'b', 'c', 3.14159) }}", {}),
    ("{{ messages[0].get('role') }} {{ messages[0].get('nope', 'dflt') }} {{ messages[0].get('nope') }} {{ messages[0].keys()|list }}"
     " {{ messages[0].values()|list }} {{ messages[0].items()|list }}", {}),
    ("{{ [1, 2, 1].count(1) }} {{ [1, 2].index(2) }} {{ messages[0].role }} {{ messages[0]['role'] }}", {}),
    # dict literals, printing, None, strings
    ("{{ {'a': 1, 'b': 'x', 1: none} }} {{ dict(a=1, b=2) }} {{ namespace(a=1) }} {{ none }} {{ true }} {{ [] }} {{ {} }}", {}),
    ("{{ 'multi' 'part' }} {{ \"dq 'inner'\" }} {{ ['it\\'s'] }} {{ ['a\"b'] }} {{ ['\\t\\x01é'] }}", {}),
    # HF helpers and variables
    ("{{ strftime_now('%Y-%m-%d %H:%M %A %b') }} {{ bos_token }}{{ eos_token }} {{ add_generation_prompt }}", {}),
    ("{{ tools is defined }} {{ tools[0].function.name }}", {}),
    ("{{ custom_var }} {{ enable_thinking is defined }}", {"custom_var": "kw", "enable_thinking": False}),
    ("{% if messages[0]['role'] != 'user' %}{{ raise_exception('first must be user: ' ~ messages[0].role) }}{% endif %}", {}),
    # errors: both must fail
    ("{{ messages[0].nope.deeper }}", {}),
    ("{{ undefined_name.attr }}", {}),
    ("{{ undefined_name + 1 }}", {}),
    ("{{ 'a' < 1 }}", {}),
    ("{{ 1 / 0 }}", {}),
    ("{% for x in none %}{% endfor %}", {}),
    ("{% set l = [1] %}{{ l.append(2) }}", {}),
    ("{{ {'a': 1}.pop('a') }}", {}),
    ("{{ [1]|tojson }}{{ undefined_name|tojson }}", {}),
    ("{% if %}{% endif %}", {}),
    ("{% for %}", {}),
    ("{{ 1 + }}", {}),
    ("{% endfor %}", {}),
    ("{{ x | nosuchfilter }}", {}),
    ("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", {}),
    ("{{ (1 if false).attr }}", {}),
    ("{% set x = 1 %}{% set x.y = 2 %}", {}),
    # more constructs, printing, methods and filters
    ("{%- for m in messages -%}\n  {%- if m.role == 'user' -%}\n    U:{{ m.content }}\n  {%- else -%}\n    O\n  {%- endif -%}\n{%- endfor -%}\n", {}),
    ("a\n{% if true %}\n\n  x\n{% endif %}\n\nb\n", {}),
    ("{% if true %}  x  {% endif %}  \n  {% if true %}y{% endif %}", {}),
    ("  {{ 'v' }}  {% if true %}\n  z{% endif %}", {}),
    ("{{- ' a ' }}\n  {%- set x = 1 %}\n{{ x }}", {}),
    ("{% for i in [1,2] -%}\n {{ i }}\n{%- endfor %}", {}),
    ("{{ '%r|%s|%5s|%-5s|%.2f|%x|%03d|%(a)s' % ('a', none, 'b', 'c', 3.14159, 255, 7, ) }}", {}),
    ("{{ '%(a)s-%(b)d' % {'a': 'x', 'b': 2} }}", {}),
    ("{{ '%s' % [1, 2] }}{{ '%s and %s' % (1, 2) }}", {}),
    ("{{ '{!r}:{}'.format('x', [1]) }}{{ '{0[0]}{1[k]}'.format([7], {'k': 8}) }}", {}),
    ("{{ 'a' is in 'cat' }}{{ 1 is sameas 1 }}{{ [] is sameas [] }}{{ 1.0 is number }}", {}),
    ("{{ ((1, 2), 3) }}{{ [(1,)] }}{{ {'a': (1, 2)} }}", {}),
    ("{{ 10000000000000000.0 }} {{ 123456789012345680.0 }} {{ 1.23456789e-7 }} {{ 5e-324 }} {{ 1.7976931348623157e308 }} {{ 100.0 }} {{ 0.5 }}", {}),
    ("{{ (0.1).__class__ }}", {}),
    ("{{ messages.__len__ }}", {}),
    ("{{ range(3)|list }}{{ range(3) is iterable }}", {}),
    ("{% for x in messages %}{{ x.content|tojson }}{% if not loop.last %},{% endif %}{% endfor %}", {}),
    ("{{ messages|tojson }}", {}),
    ("{{ messages[0]|tojson(indent=4) }}", {}),
    ("{{ 'x'|tojson(true) }}{{ 'ü🦊'|tojson(ensure_ascii=true) }}", {}),
    ("{% set x %}{% for i in range(3) %}{{ i }}{% endfor %}{% endset %}{{ x|length }}", {}),
    ("{{ 'Hello World'|title }} {{ \"they're bill's\"|title }} {{ 'x1y'|title }}", {}),
    ("{{ [1, 'a']|sort }}", {}),
    ("{{ none|length }}", {}),
    ("{{ 5|length }}", {}),
    ("{{ {'a': 1}|first }}{{ {}|first }}x", {}),
    ("{{ 'abc'|batch(2)|list }}", {}),
    ("{{ [1, 2, 3]|join }}{{ [none, 1.5]|join('|') }}", {}),
    ("{{ -1|abs }} {{ -1.5|abs }} {{ 3|float|string }} {{ 1e3|int }} {{ '1e3'|int }} {{ ' 7 '|int }} {{ '1_000'|int }}", {}),
    ("{{ 'a-b'.split('-', -1) }} {{ ''.split() }} {{ ''.split(',') }} {{ '  a b  c '.rsplit(None, 1) }} {{ 'a  b  c'.split(None, 1) }}", {}),
    ("{{ 'abc'.find('z') }}{{ 'aaa'.count('aa') }}{{ 'x'.center(4, '*') }}{{ 'ab'.ljust(4, '.') }}{{ 'ab'.rjust(4) }}{{ '5'.zfill(3) }}", {}),
    ("{{ 'abc'.startswith('b', 1) }}{{ 'abc'.endswith('b', 0, 2) }}{{ 'a.b.c'.rsplit('.', 1)[0] }}", {}),
    ("{{ 'Tool: {name}'.format(**{'name': 1}) }}", {}),
    ("{% macro m(a, b) %}{{ a }}{{ b }}{% endmacro %}{{ m(b=1, a=2) }}{{ m() }}", {}),
    ("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, x=2) }}", {}),
    ("{% for a, b in [[1, 2, 3]] %}{% endfor %}", {}),
    ("{% for a, b in [[1]] %}{% endfor %}", {}),
    ("{% for a, b in ['ab'] %}{{ a }}{{ b }}{% endfor %}", {}),
    ("{{ loop }}", {}),
    ("{% for i in [1] %}{{ loop }}{% endfor %}", {}),
    ("{% for i in [1, 2] %}{% for j in [3] %}{{ loop.index }}{% endfor %}{{ loop.index }}{% endfor %}", {}),
    ("{{ [1, 2, 3][1:-1] }}{{ [1, 2, 3][-100:100] }}{{ 'abc'[::2] }}{{ [1,2,3,4,5][4:1:-2] }}", {}),
    ("{{ 3 // 0 }}", {}),
    ("{{ 3 % 0 }}", {}),
    ("{{ 1.5 // 0 }}", {}),
    ("{{ 2 ** 62 }} {{ -2 ** 2 }} {{ (-2) ** 2 }} {{ 2 ** 3 ** 2 }}", {}),
    ("{{ 9223372036854775807 }} {{ -9223372036854775807 - 1 }}", {}),
    ("{{ 1 if true else 2 if false else 3 }}{{ 'x' if none is none }}", {}),
    ("{{ not 1 == 2 }}{{ not (1 and 0) }}{{ 1 and 2 or 3 }}{{ 0 and 2 or 3 }}", {}),
    ("{{ 'ab' in ['ab'] }}{{ 'a' in ('a',) }}{{ none in [none] }}{{ 1 in [1.0] }}", {}),
    ("{{ 1 in 'abc' }}", {}),
    ("{{ 'a' < none }}", {}),
    ("{{ [1] < [1, 2] }}{{ (1, 2) == [1, 2] }}{{ 'b' > 'a' }}{{ 2 >= 2.0 }}", {}),
    ("{{ x }}{{ x is none }}{{ x is not defined }}", {"x": None}),
    ("{{ 'abc' ~ 1.0 ~ 2.50 ~ -0.0 ~ 1e100 }}", {}),
    ("{% set ns = namespace(a=[]) %}{% set ns.a = ns.a + ['x'] %}{{ ns.a }}{{ ns.b }}{{ ns.a|length }}", {}),
    ("{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}", {}),
    ("{{ dict([('a', 1)], b=2) }}{{ dict({'z': 0}) }}", {}),
    ("{% set j = joiner('|') %}{% for i in range(3) %}{{ j() }}{{ i }}{% endfor %}", {}),
    ("{% filter replace('a', 'b') %}aaa{% endfilter %}{% filter trim|upper %}  x  {% endfilter %}", {}),
    ("{{ messages|map(attribute='nope')|list }}{{ messages|map(attribute='nope', default='d')|list }}", {}),
    ("{{ [{'a': {'b': 1}}]|map(attribute='a.b')|list }}{{ [[1, 2]]|map(attribute='1')|list }}", {}),
    ("{{ messages|selectattr('content')|list|length }}{{ [1, 2, 3]|select('in', [1, 2])|list }}{{ [1,2,3]|select('divisibleby', 2)|list }}", {}),
    ("{{ ['b', 'a']|map('upper')|sort|join }}{{ [1, 2]|map('string')|join('+') }}{{ ['1', '2']|map('int')|sum }}", {}),
    ("{{ [{'n': 2}, {'n': 1}]|sort(attribute='n')|map(attribute='n')|list }}{{ [{'n': 2}, {'n': 1}]|max(attribute='n') }}", {}),
    ("{{ 'AbC'|unique|list }}{{ [1, 1.0, True]|unique|list }}", {}),
    ("{{ {'b': 1, 'A': 2, 'a': 3}|dictsort }}{{ {'b': 1, 'A': 2}|dictsort(true) }}{{ {'a': 2, 'b': 1}|dictsort(reverse=true) }}", {}),
    ("{{ 'a'|indent(first=true) }}|{{ ''|indent }}|{{ 'a\n'|indent }}|{{ 'a\r\nb'|indent(1) }}", {}),
    ("{{ 'x\u2028y'|indent(1) }}|{{ ' \t x \u00a0'|trim }}|", {}),
    ("{{ 'hello   world\nfoo'|wordcount }}{{ 'a-b_c'|wordcount }}", {}),
    ("{{ '<>'|escape|length }}{{ '<>'|forceescape }}", {}),
    ("{{ 'abc'|center(8) }}|{{ 'abc'|center(2) }}|", {}),
    ("{{ 2.5|round(0) }} {{ 2.55|round(1) }} {{ -0.5|round }} {{ 1234.5678|round(-2) }} {{ 15|round(-1) }}", {}),
    ("{{ 'abc'|replace('b', 'x')|replace('', '.') }}{{ 'x'|replace('x', 'y', 0) }}", {}),
    ("{{ 'a\tb'|tojson }}{{ '\x7f\x01'|tojson }}{{ {'k': inf}|string if false else '' }}", {}),
    ("{{ {1: 'a', true: 'b', none: 'c', 1.5: 'd'}|tojson }}", {}),
    ("{{ {1: 'a', true: 'b'} }}", {}),
    ("{{ 'x'|truncate(0) }}{{ 'hello world foo'|truncate(11, false, '..', 0) }}", {}),
    ("{{ strftime_now('%d %B %Y, %I:%M %p %j %a') }}", {}),
    ("{% if messages is defined and messages|length > 0 and messages[0].role is string %}ok{% endif %}", {}),
    ("{{ raise_exception('a' ~ 1) }}", {}),
    ("{{ raise_exception(42) }}", {}),
    ("{% macro m() %}{{ raise_exception('inside macro') }}{% endmacro %}{{ m() }}", {}),
    ("{%- set x = {'a': [1, 2]} -%}{{ x.a[1:] }}{{ x['a'][-1] }}", {}),
    ("text {# a {{ nested }} comment #} more", {}),
    ("{% raw -%}   a   {%- endraw %}", {}),
    ("{{ 'a' }}{{ \"b\" }}{{ '''c''' if false else 'd' }}", {}),
    ("{% set a = 1 %}{% set b = a %}{% set a = 2 %}{{ b }}{{ a }}", {}),
    ("{% for i in range(3) %}{% set x = i %}{% endfor %}{{ x }}", {}),
    ("{% set items = [] %}{% for i in range(3) %}{% set items = items + [i] %}{% endfor %}{{ items }}", {}),
    ("{{ caller() }}", {}),
    ("{% macro m() %}{{ caller is defined }}{% endmacro %}{{ m() }}", {}),
    ("{% macro m(x) %}{{ x }}{% endmacro %}{{ m }}{{ m.name if false else '' }}", {}),
    ("{{ m() }}{% macro m() %}late{% endmacro %}", {}),
    ("{{ True }}{{ False }}{{ None }}{{ TRUE }}", {}),
    ("{{ 1e3 }}{{ 1E3 }}{{ 1.5e+2 }}{{ 1_0.0_1 }}", {}),
    ("{{ [1, 2,] }}{{ {'a': 1,} }}{{ (1, 2,) }}", {}),
    ("{{ a.b }}", {"a": {"b": "c"}}),
    ("{{ a }}", {"a": [1.0, 2, "x", None, True, {"k": -0.5}]}),
    ("{{ a|tojson }}", {"a": [1.0, 2, "x", None, True, {"k": -0.5, "e": 1e-7, "big": 1e300}]}),
    # select / reject / selectattr / rejectattr / map are generators that yield nothing over a
    # falsy value (none, undefined, 0, ''), whatever their arguments; a generator is always true,
    # has no len(), is not reversible, not JSON, not subscriptable, not a sequence
    ("{{ n|select|list }}{{ n|select('defined')|list }}{{ undef|select|list }}{{ undef|selectattr('a')|list }}"
     "{{ n|selectattr('a', 'equalto', 1)|list }}{{ n|rejectattr('a')|list }}{{ n|reject('none')|list }}", {"n": None}),
    ("{{ n|map('upper')|list }}{{ n|map(attribute='x')|list }}{{ undef|map(attribute='x')|list }}"
     "{{ n|map('nosuchfilter')|list }}{{ n|select('nosuchtest')|list }}{{ 0|select|list }}{{ ''|map('upper')|list }}", {"n": None}),
    ("{{ n|selectattr('a')|list|length }}{{ n|select|first }}|{{ undef|select|first }}|{{ n|select|list|tojson }}"
     "{{ n|reject|join(',') }}|{{ n|map('string')|sort }}{{ n|select|unique|list }}{{ n|select|sum }}", {"n": None}),
    ("{% for x in n|select %}{{ x }}{% else %}empty{% endfor %}{% if n|selectattr('a')|list %}y{% else %}n{% endif %}"
     "{% if n|selectattr('a') %}gen-true{% endif %}{% if [1]|reject %}gen-true{% endif %}", {"n": None}),
    ("{{ [1, 2]|select is iterable }}{{ [1, 2]|select is sequence }}{{ [1, 2]|select is mapping }}{{ [1, 2]|select is defined }}"
     "{{ ([1, 2]|select)[0] is defined }}{{ ([1, 2]|map('string')).append is defined }}", {}),
    ("{{ [1, 2]|select|length }}", {}),
    ("{{ [1, 2]|map('string')|count }}", {}),
    ("{{ [1, 2]|select|last }}", {}),
    ("{{ [1, 2]|select|tojson }}", {}),
    ("{{ tools|map(attribute='function')|tojson(indent=2) }}", {}),
    ("{{ [1, 2]|select + [3] }}", {}),
    ("{{ [3, 1, 2]|select|reverse|list }}{{ [3, 1, 2]|select|sort }}{{ [3, 1, 2]|select|min }}{{ [1, 2]|select|join('-') }}"
     "{{ 2 in [1, 2]|select }}{{ [1, 2]|select|batch(1)|list }}", {}),
    ("{{ n|list }}", {"n": None}),
    ("{{ n|length }}", {"n": None}),
    ("{{ n|first }}", {"n": None}),
    ("{{ n|join(',') }}", {"n": None}),
    ("{{ 5|select|list }}", {}),
    ("{{ undef|list }}{{ undef|length }}{{ undef|first }}{{ undef|join(',') }}{{ undef|sort }}{{ undef|sum }}{{ undef|unique|list }}", {}),
    ("{{ 'ab'|select|list }}{{ {'a': 1, 'b': 0}|select|list }}{{ messages|selectattr('tool_calls')|map(attribute='role')|list }}", {}),
    ("{% for c in m.content|selectattr('type', 'equalto', 'text') %}{{ c.text }}{% endfor %}|"
     "{% for c in m2.content|selectattr('type', 'equalto', 'text') %}{{ c.text }}{% endfor %}|"
     "{% for c in m3.content|selectattr('type', 'equalto', 'text') %}[{{ c }}]{% endfor %}",
     {"m": {"content": None}, "m2": {"content": [{"type": "text", "text": "T"}, {"type": "image"}]}, "m3": {"content": "str"}}),
    # |safe gives Markup: + escapes a plain str operand on either side, ~ joins as plain str
    ("{{ '<b>'|safe + '<i>' }}|{{ '<i>' + '<b>'|safe }}|{{ '<b>'|safe ~ '<i>' }}|{{ '<i>' ~ '<b>'|safe }}|"
     "{{ ('<b>'|safe ~ '<i>') + '<u>' }}|{{ '&amp;'|safe + '&amp;' }}|{{ 'x'|safe + '\\'\"&' }}", {}),
    ("{{ '<b>'|safe|length }} {{ '<b>'|safe == '<b>' }} {{ 'b' in '<b>'|safe }} {{ '<b>'|safe < 'c' }} {{ '<b>'|safe is string }}"
     " {{ '<b>'|safe is escaped }} {{ '<b>' is escaped }} {{ '<b>'|e is escaped }}", {}),
    ("{{ ('<b>{}'|safe).format('<x>') }}|{{ ('<b>%s'|safe) % '<x>' }}|{{ ('<b>%s %s %d'|safe) % ('<x>', 1, 2) }}|"
     "{{ ('{x}'|safe).format(x='<') }}|{{ ('<{0}>'|safe).format('<y>'|safe) }}|{{ ('%(a)s'|safe) % {'a': '<'} }}|"
     "{{ ('%s'|safe) % ['<'] }}", {}),
    ("{{ '<b>'|safe|e }}|{{ '<b>'|e }}|{{ '<b>'|e + '<i>' }}|{{ '<b>'|e|e }}|{{ '<b>'|forceescape }}|{{ '<b>'|safe|forceescape }}|"
     "{{ ('x'|safe)|escape|length }}|{{ '\\'\"&<>'|e }}|{{ 5|e + '<' }}|{{ none|e }}", {}),
    ("{{ ('<b>'|safe|string) + '<i>' }}|{{ ('<b>'|safe|upper) + '<i>' }}|{{ ('<b>'|safe|lower) + '<i>' }}|"
     "{{ (' <b> '|safe|trim) + '<i>' }}|{{ ('<b>'|safe|capitalize) + '<' }}|{{ ('<b>'|safe|center(7)) + '<' }}|"
     "{{ ('<b>'|safe|indent(2)) + '<' }}|{{ ('<b>'|safe|default('x')) + '<' }}|{{ ('<b>'|safe|reverse) + '<' }}", {}),
    ("{{ ('<b>'|safe|title) + '<' }}|{{ ('<b>'|safe|replace('b', '<c>')) + '<' }}|{{ ['<a>'|safe, '<b>']|join(',') + '<' }}|"
     "{{ ['<a>', '<b>']|join(','|safe) + '<' }}|{{ ('<b>'|safe|first) + '<' }}|{{ ('%s'|format('<b>'|safe)) + '<' }}|"
     "{{ ('<%s'|safe|format('<b>')) + '<' }}|{{ ('<b>'|safe|tojson) + '<' }}|{{ ('<b>'|safe|list) }}", {}),
    ("{{ ('x'|safe) * 2 + '<' }}|{{ ('<b>'|safe)[0] + '<' }}|{{ ('<b>'|safe)[1:] + '<' }}|"
     "{% for c in '<b>'|safe %}{{ c + '<' }}{% endfor %}|{{ ['<b>'|safe] }}|{{ {'<b>'|safe: 1} }}|{{ ('<b>'|safe) ~ 1 }}", {}),
    ("{{ ('<b>'|safe).upper() + '<' }}|{{ (' <b> '|safe).strip() + '<' }}|{{ ('<b> <c>'|safe).split() }}|"
     "{{ ('<b>'|safe).replace('b', '<') }}|{{ ('<b>'|safe).startswith('<') }}|{{ ('a<b>'|safe).lstrip('a') + '<' }}|"
     "{{ ('<b>'|safe).join(['<1>', '<2>'|safe]) }}|{{ ('<b>'|safe).split('b')[0] + '<' }}|{{ ('x'|safe).count('x') }}", {}),
    ("{% set x = '<b>'|safe %}{% set y = x + '<' %}{{ y + '&' }}|{% set ns = namespace(s='') %}"
     "{% set ns.s = ns.s + ('<b>'|safe) %}{% set ns.s = ns.s + '<i>' %}{{ ns.s }}|{{ 5|safe + '<' }}|{{ none|safe + '<' }}", {}),
    ("{{ \"Use '\"|safe + tools[0].function.name + \"' to '\"|safe + tools[0].function.description + \"'\\n\"|safe"
     " + tools[0].function|tojson }}", {}),
    ("{{ \"Use '\"|safe + t.name + \"' to '\"|safe + t.description + \"'\"|safe + t|tojson }}",
     {"t": {"name": "a<b>", "description": "Say \"hi\" & 'bye'", "x": [1, "<"]}}),
    ("{%- set args = {'a': [1, '<'], 'b': 'x&y'} | tojson | safe %}{{ 'name' + '[ARGS]' + args }}|{{ args ~ '<' }}", {}),
    ("{{ '<b>'|safe + 1 }}", {}),
    ("{{ '<b>'|safe + none }}", {}),
    ("{{ '<b>'|safe + ['x'] }}", {}),
]


def render_jinja(template, variables):
    try:
        return {"ok": True, "prompt": env.from_string(template).render(**variables)}
    except TemplateError as error:
        kind = "raise_exception" if type(error) is TemplateError else type(error).__name__
        return {"ok": False, "error": kind, "message": str(error)}
    except Exception as error:  # TypeError, ZeroDivisionError, ...: Jinja2 lets them through
        return {"ok": False, "error": type(error).__name__, "message": str(error)}


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    requests, expected = [], []
    for template, extra in CASES:
        variables = {"messages": MESSAGES, "tools": TOOLS, "add_generation_prompt": True,
                     "bos_token": "<s>", "eos_token": "</s>", **extra}
        requests.append({"template": template, "messages": MESSAGES, "tools": TOOLS, "add_generation_prompt": True,
                         "bos_token": "<s>", "eos_token": "</s>", "extra": extra,
                         "now": int(NOW.timestamp())})
        expected.append(render_jinja(template, variables))
    result = subprocess.run([sys.argv[1]], input=json.dumps(requests), capture_output=True, text=True)
    if result.returncode != 0:
        print(f"jinja_oracle: {sys.argv[1]} failed: {result.stderr}", file=sys.stderr)
        return 1
    actual = json.loads(result.stdout)
    failures = 0
    for (template, _), want, got in zip(CASES, expected, actual):
        if want["ok"]:
            same = got["ok"] and got["prompt"] == want["prompt"]
        elif want["error"] == "raise_exception":
            same = not got["ok"] and got["error"] == "raise_exception" and got["message"] == want["message"]
        else:
            same = not got["ok"] and got["error"] != "raise_exception"
        if not same:
            failures += 1
            print(f"MISMATCH for template {template!r}\n  jinja2: {want}\n  okapi:  {got}")
    print(f"jinja_oracle: {len(CASES) - failures} of {len(CASES)} templates agree with Jinja2 {jinja2.__version__}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
