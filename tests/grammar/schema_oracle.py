#!/usr/bin/env python3
"""Validates JSON instances against JSON schemas with python3-jsonschema (the oracle of
tests/grammar/schema_corpus_test.cpp, one process for the whole corpus).

Input (argv[1]): a JSON file, a list of {"schema": FILE, "instance": TEXT}. Prints one line per
failure ("FAIL <file>: <reason>: <instance>") and a last line "checked N". The formats the
converter constrains (date, time, date-time, uuid) are checked by the RFC 3339 / RFC 4122 rules
written here, so the result does not depend on which optional format packages are installed.
"""
import datetime
import json
import re
import sys

import jsonschema

TIME_RE = re.compile(r"^([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$")
DATE_RE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")
UUID_RE = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")

checker = jsonschema.FormatChecker(formats=())


@checker.checks("date")
def is_date(value):
    if not isinstance(value, str):
        return True
    if not DATE_RE.match(value):
        return False
    try:
        datetime.date(int(value[0:4]), int(value[5:7]), int(value[8:10]))
    except ValueError:
        return False
    return True


@checker.checks("time")
def is_time(value):
    return not isinstance(value, str) or bool(TIME_RE.match(value))


@checker.checks("date-time")
def is_date_time(value):
    if not isinstance(value, str):
        return True
    parts = re.split("[Tt]", value, maxsplit=1)
    return len(parts) == 2 and is_date(parts[0]) and is_time(parts[1])


@checker.checks("uuid")
def is_uuid(value):
    return not isinstance(value, str) or bool(UUID_RE.match(value))


def reject_constant(name):
    raise ValueError("not JSON: " + name)


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    validators = {}
    failures = 0
    for case in cases:
        path = case["schema"]
        if path not in validators:
            with open(path, encoding="utf-8") as f:
                schema = json.load(f)
            cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
            cls.check_schema(schema)
            validators[path] = cls(schema, format_checker=checker)
        text = case["instance"]
        try:
            instance = json.loads(text, parse_constant=reject_constant)
        except ValueError as error:
            print(f"FAIL {path}: invalid JSON ({error}): {text!r}")
            failures += 1
            continue
        errors = list(validators[path].iter_errors(instance))
        if errors:
            print(f"FAIL {path}: {errors[0].message[:300]}: {text!r}")
            failures += 1
    print(f"checked {len(cases)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
