#!/usr/bin/env python3
"""Writes cases.json: Jinja snippets with the output Python's jinja2 renders for them in
the environment transformers uses for chat templates (its sandbox, here the mutable one so list.append works,
trim_blocks, lstrip_blocks, tojson = json.dumps(ensure_ascii=False), raise_exception,
strftime_now at a fixed date). tests/unit/tokenizer_jinja_test.cc renders each snippet
with pdserve's interpreter and compares byte for byte."""
import json
from datetime import datetime, timezone

import jinja2
import jinja2.ext
from jinja2.sandbox import SandboxedEnvironment

NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)


def raise_exception(msg):
    raise jinja2.exceptions.TemplateError(msg)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


env = SandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = lambda fmt: NOW.strftime(fmt)

VARS = {
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi  there "},
        {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1, "b": "é"}}}]},
        {"role": "tool", "content": "42"},
    ],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "n": 7, "x": 2.5, "s": "Hello World", "flag": True, "empty": [], "d": {"b": 2, "a": 1, "c": [1, 2]},
    "bos_token": "<s>",
}

SNIPPETS = [
    # statements and whitespace control
    "{% if n > 5 %}big{% elif n > 2 %}mid{% else %}small{% endif %}",
    "{% for m in messages %}{{ loop.index }}/{{ loop.length }}:{{ m.role }}{% if not loop.last %},{% endif %}{% endfor %}",
    "{% for m in messages %}{{ loop.index0 }}{{ loop.first }}{{ loop.revindex }}{{ loop.revindex0 }} {% endfor %}",
    "{% for m in messages if m.role != 'system' %}{{ loop.index }}{{ m.role }} {% endfor %}",
    "{% for x in empty %}x{% else %}none{% endfor %}",
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
    "{% for k in d %}{{ k }}{% endfor %}",
    "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}",
    "{% set y = n * 2 %}{{ y }}",
    "{% set a, b = [1, 2] %}{{ a }}{{ b }}",
    "{% set ns = namespace(found=false, count=0) %}{% for m in messages %}{% if m.role == 'tool' %}{% set ns.found = true %}{% endif %}{% set ns.count = ns.count + 1 %}{% endfor %}{{ ns.found }} {{ ns.count }}",
    "{% set v = 1 %}{% for i in range(3) %}{% set v = i %}{% endfor %}{{ v }}",
    "{% set block %}  inner {{ n }}  {% endset %}[{{ block }}]",
    "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Bob') }} {{ greet('Al', punct='?') }}",
    "{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}body{% endcall %}",
    "{% macro rec(k) %}{% if k > 0 %}{{ k }}{{ rec(k - 1) }}{% endif %}{% endmacro %}{{ rec(3) }}",
    "a  {{- ' b ' -}}  c",
    "line1\n  {% if flag %}\n  yes\n  {% endif %}\nline2\n",
    "{# comment #}x\n{#- c2 -#}  y",
    "  {%+ if flag %}keep{% endif +%}\nz",
    "{% filter upper %}shout {{ s }}{% endfilter %}",
    "{% raw %}{{ not parsed }}{% endraw %}",
    # expressions
    "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }}",
    "{{ 'a' ~ 1 ~ none }} {{ 'ab' * 3 }} {{ [1] + [2] }}",
    "{{ 'x' if flag else 'y' }} {{ 'x' if not flag else 'y' }}{{ 'z' if false }}",
    "{{ 1 in [1, 2] }} {{ 3 not in [1, 2] }} {{ 'ell' in s }} {{ 'a' in d }}",
    "{{ n == 7 and x < 3 }} {{ n != 7 or x >= 2.5 }} {{ not flag }}",
    "{{ s[0] }}{{ s[-1] }} {{ s[1:4] }} {{ s[::-1] }} {{ s[:5] }} {{ [1,2,3,4][1:] }} {{ [1,2,3,4][::2] }}",
    "{{ messages[0]['content'] }} {{ messages[1].role }} {{ d.c[1] }} {{ d['c'][0] }}",
    "{{ {'k': 1, 'j': [true, none]} }} {{ [1, 'two', 3.0] }} {{ (1, 2) }}",
    "{{ missing }}|{{ missing is defined }}|{{ missing is undefined }}|{{ missing | default('dflt') }}",
    "{{ none }} {{ true }} {{ 3.0 }} {{ 0.1 + 0.2 }} {{ 1e3 }} {{ x * 2 }}",
    # tests
    "{{ s is string }} {{ d is mapping }} {{ empty is iterable }} {{ n is number }} {{ x is number }} {{ flag is boolean }} {{ none is none }} {{ messages is sequence }}",
    "{{ n is odd }} {{ n is even }} {{ n is divisibleby 7 }} {{ 'a' is in 'abc' }} {{ n is equalto 7 }} {{ flag is true }} {{ flag is false }} {{ n is integer }} {{ x is float }}",
    "{{ s is not string }} {{ missing is not none }} {{ d is not mapping }}",
    # filters
    "{{ '  pad  ' | trim }}|{{ s | upper }}|{{ s | lower }}|{{ s | length }}|{{ messages | length }}|{{ d | length }}",
    "{{ tools | tojson }}",
    "{{ d | tojson(indent=2) }}",
    "{{ messages[2].tool_calls[0].function.arguments | tojson }} {{ 'é\"\\n' | tojson }} {{ none | tojson }} {{ 1.5 | tojson }}",
    "{{ d | tojson(sort_keys=true) }}",
    "{{ n | string }}{{ [1, 2] | join(', ') }}|{{ messages | map(attribute='role') | join(',') }}",
    "{{ messages | first | tojson }} {{ (messages | last).role }} {{ s | first }}",
    "{{ d | items | list }} {{ 'abc' | list }}",
    "{{ messages | selectattr('role', 'equalto', 'user') | list | length }} {{ messages | rejectattr('role', 'in', ['system', 'tool']) | map(attribute='role') | list }}",
    "{{ messages | selectattr('tool_calls', 'defined') | list | length }} {{ [0, 1, 2] | select | list }} {{ [0, 1, 2] | reject('odd') | list }}",
    "{{ s | replace('o', '0') }} {{ 'hello world' | capitalize }} {{ 'hello big world' | title }} {{ s | safe }}",
    "{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(4, first=true) }}|{{ 'a\\n\\nb' | indent(2, blank=true) }}",
    "{{ '42' | int + 1 }} {{ 'x' | int }} {{ 3.7 | int }} {{ 2.567 | round(2) }} {{ 2.5 | round }} {{ '1.5' | float }}",
    "{{ [3, 1, 2] | sort }} {{ [1, 2, 1, 3] | unique | list }} {{ [1, 2, 3] | reverse | list }} {{ [1, 2, 3] | sum }} {{ [4, 2, 8] | max }} {{ -3 | abs }}",
    "{{ missing | default('x', true) }} {{ '' | default('y', true) }} {{ '' | default('y') }}|{{ d | dictsort }}",
    "{{ [1, 2, 3] | map('string') | join }}",
    # methods
    "[{{ '  x y  '.strip() }}][{{ 'xxhixx'.strip('x') }}][{{ '  a'.lstrip() }}][{{ 'b  '.rstrip() }}]",
    "{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }}",
    "{{ s.startswith('Hell') }} {{ s.endswith('x') }} {{ s.startswith(('x', 'H')) }} {{ s.upper() }} {{ s.lower() }} {{ 'ab cd'.title() }}",
    "{{ s.replace('l', 'L') }} {{ s.replace('l', 'L', 1) }} {{ s.find('o') }} {{ s.find('z') }} {{ s.count('l') }} {{ '-'.join(['a', 'b']) }}",
    "{{ '{} and {}'.format('x', 2) }} {{ 'hi {name}'.format(name='bo') }}",
    "{{ d.get('a') }} {{ d.get('zz', 'no') }} {{ d.get('zz') }} {{ d.keys() | list }} {{ d.values() | list }}",
    "{% set l = [] %}{% for i in range(3) %}{% set _ = l.append(i * i) %}{% endfor %}{{ l }}",
    "{{ range(3) | list }} {{ range(1, 4) | list }} {{ range(10, 0, -3) | list }}",
    "{{ strftime_now('%Y-%m-%d') }} {{ strftime_now('%d %b %Y') }}",
    "{{ dict(a=1, b='x') }} {{ namespace(k=1).k }}",
    "{{ messages[1].content.strip() ~ '|' }}{{ messages[0]['content'][:3] }}",
    "{{ '<' + messages[2].role + '>' }}{{ messages[2].content is none }}",
]

cases = []
for src in SNIPPETS:
    out = env.from_string(src).render(**VARS)
    cases.append({"template": src, "output": out})

with open("cases.json", "w", encoding="utf-8") as f:
    json.dump({"vars": VARS, "now_utc": "2026-12-01", "jinja2": jinja2.__version__, "cases": cases}, f,
              ensure_ascii=False, indent=1)
    f.write("\n")
print(len(cases), "cases")
